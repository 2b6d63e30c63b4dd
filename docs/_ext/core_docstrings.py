"""A griffe extension for the API reference: the C extension's own docstrings beside its stubs.

griffe reads ``ling_bloom/_core.pyi`` statically (signatures, types, the stubs' docstrings).
The compiled module carries docstrings of its own (csrc/py: each type's ``tp_doc`` with its
constructor forms, each method's doc).  This extension imports the built module and, for every
object of ``ling_bloom._core`` that the stubs declare, puts the C docstring in the page too:
its leading signature lines as a code block for a class (its constructor forms; dropped for
a function, whose signature the stub gives), the stub's text when it says something the C
text does not, then the C text.
Nothing is copied by hand: the reference follows the code on every build.
"""
from __future__ import annotations

import importlib
import re
from typing import Any, Optional

try:
    import griffe
    _Extension = griffe.Extension
except ImportError:  # the merge rules alone (tests/docs imports them without the docs extra)
    griffe = None  # type: ignore[assignment]
    _Extension = object  # type: ignore[assignment,misc]

_SIG = re.compile(r"^[A-Za-z_][\w.]*\(.*\)(\s*->.*)?$")


def _norm(text: str) -> str:
    return " ".join(text.split())


def _split_c_doc(doc: str) -> "tuple[list[str], str]":
    """The leading signature lines of a C docstring, and the text after them."""
    lines = doc.strip("\n").splitlines()
    sigs = []
    while lines and _SIG.match(lines[0].strip()):
        sigs.append(lines.pop(0).strip())
    return sigs, "\n".join(lines).strip()


def _merge(c_doc: Optional[str], stub_doc: Optional[str], is_class: bool) -> Optional[str]:
    if not c_doc:
        return stub_doc
    sigs, body = _split_c_doc(c_doc)
    parts = []
    if is_class and sigs:
        parts.append("```python\n" + "\n".join(sigs) + "\n```")
    s, b = _norm(stub_doc or ""), _norm(body)
    if s and b and b in s:      # the stub says all the C text says (and maybe more)
        body = ""
    if s and (s not in b or not body):  # the stub's own words lead, or stand for both
        parts.append(stub_doc.strip())
    if body:
        parts.append(body)
    return "\n\n".join(parts) or stub_doc


_CODE = re.compile(r"(``.+?``|`[^`]+`)")
_ROLE = re.compile(r":(?:func|class|meth|attr|exc|mod|data):`~?([^`]+)`")


def _escape_prose(text: str) -> str:
    """Plain text, as the docstrings are written, made safe for Markdown: brackets, stars,
    underscores and angle brackets shown as they are (a URL's ``[user:password@]`` is not a
    link, ``n*-ln p`` not emphasis); code spans, fenced and indented blocks left alone."""
    text = _ROLE.sub(lambda m: "`" + m.group(1) + "`", text)
    out = []
    in_block = False
    in_fence = False
    prev_blank = True
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            out.append(line)
            continue
        if in_fence:
            out.append(line)
            continue
        blank = not line.strip()
        if line.startswith("    ") and (prev_blank or in_block) and not blank:
            in_block = True
            out.append(line)
        else:
            if not blank:
                in_block = False
            parts = _CODE.split(line)
            for i in range(0, len(parts), 2):
                parts[i] = (parts[i].replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")
                            .replace("*", "\\*").replace("_", "\\_").replace("<", "&lt;"))
            out.append("".join(parts))
        prev_blank = blank
    return "\n".join(out)


class CoreDocstrings(_Extension):  # type: ignore[misc,valid-type]
    """Merge the built ``ling_bloom._core``'s docstrings into the stubs' objects."""

    def __init__(self, module: str = "ling_bloom._core") -> None:
        self.module = module

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.path != self.module.split(".")[0]:
            return
        core = pkg.get_member(self.module.split(".", 1)[1])
        runtime = importlib.import_module(self.module)
        self._overloads_as_members(core)
        self._walk(core, runtime)
        if pkg.docstring is not None:
            pkg.docstring.value = _escape_prose(pkg.docstring.value)
        self._escape(pkg, set())

    def _overloads_as_members(self, obj: griffe.Object) -> None:
        """A stub declares a method by its overloads alone (a stub has no implementation):
        griffe keeps them aside, not as a member; the reference shows the method by its
        first overload (the one with the docstring), all of them as its signatures."""
        for member in list(obj.members.values()):
            if not member.is_alias and member.is_class:
                self._overloads_as_members(member)
        for name, overloads in getattr(obj, "overloads", {}).items():
            if overloads and name not in obj.members:
                first = overloads[0]
                first.overloads = list(overloads)
                obj.set_member(name, first)

    def _escape(self, obj: griffe.Object, seen: "set[str]") -> None:
        for member in obj.members.values():
            if member.is_alias or member.path in seen:
                continue
            seen.add(member.path)
            if member.docstring is not None:
                member.docstring.value = _escape_prose(member.docstring.value)
            if member.is_class or member.is_module:
                self._escape(member, seen)

    def _walk(self, obj: griffe.Object, runtime: Any) -> None:
        for name, member in list(obj.members.items()):
            if member.is_alias:
                continue
            live = getattr(runtime, name, None)
            if live is None:
                continue
            if member.is_class or member.is_function:
                c_doc = getattr(live, "__doc__", None)
                if isinstance(c_doc, str) and not _is_inherited_doc(live, name, runtime):
                    stub = member.docstring.value if member.docstring else None
                    text = _merge(c_doc, stub, member.is_class)
                    if text is not None and text != stub:
                        member.docstring = griffe.Docstring(text, parent=member)
            if member.is_class:
                self._walk(member, live)


def _is_inherited_doc(live: Any, name: str, owner: Any) -> bool:
    """True for the default docstrings Python gives objects that have none of their own
    (``object.__init__``'s, a builtin exception's), which say nothing about ling_bloom."""
    if isinstance(live, type):
        for base in live.__mro__[1:]:
            if base.__module__ == "builtins" and base.__doc__ == live.__doc__:
                return True
        return False
    for base in getattr(owner, "__mro__", ())[1:]:
        if getattr(base, "__module__", "") == "builtins" and getattr(getattr(base, name, None), "__doc__", 0) == live.__doc__:
            return True
    return False
