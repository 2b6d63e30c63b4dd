"""After `mkdocs build`: does the API reference in SITE/api/ cover the public API?

Every name of ``ling_bloom.__all__`` must have an entry (an element whose id is its path),
and every public method, property and attribute of each public class its own entry too,
except what the class inherits from Python's builtins (an exception's ``args``, a named
tuple's ``count``).  Exit 1 with the list of what is missing.

    python docs/_ext/check_site.py site
"""
from __future__ import annotations

import builtins
import inspect
import re
import sys
from pathlib import Path


def _builtin_names() -> "set[str]":
    names: "set[str]" = set()
    for obj in vars(builtins).values():
        if isinstance(obj, type):
            names |= set(dir(obj))
    return names


def expected() -> "dict[str, list[str]]":
    """{entry id: [ids of its members]} for every public name of ling_bloom."""
    import ling_bloom

    skip = _builtin_names()
    out: "dict[str, list[str]]" = {}
    for name in ling_bloom.__all__:
        obj = getattr(ling_bloom, name)
        members = []
        if inspect.isclass(obj):
            for attr in dir(obj):
                if attr.startswith("_") or (attr in skip and not _own(obj, attr)):
                    continue
                members.append(attr)
        out[name] = members
    return out


def _own(cls: type, attr: str) -> bool:
    """Defined by ling_bloom (in the class or a base of its own), not only by a builtin."""
    for klass in cls.__mro__:
        if attr in vars(klass):
            return klass.__module__ != "builtins"
    return False


def main(site: str) -> int:
    ids: "set[str]" = set()
    for page in Path(site, "api").rglob("*.html"):
        ids |= set(re.findall(r'id="(ling_bloom[\w.]*)"', page.read_text(encoding="utf-8")))
    missing = []
    aliases = {"warmup": "ling_bloom.warmup.warmup", "sync": "ling_bloom.warmup.sync"}
    for name, members in expected().items():
        entry = aliases.get(name, f"ling_bloom.{name}")
        if entry not in ids:
            missing.append(entry)
            continue
        missing += [f"{entry}.{m}" for m in members if f"{entry}.{m}" not in ids]
    if missing:
        print("not in the API reference:\n  " + "\n  ".join(missing), file=sys.stderr)
        return 1
    print(f"API reference: {len(expected())} public names and their members, all present")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "site"))
