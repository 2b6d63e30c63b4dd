/* saveload.h: what every type shares to persist and show itself: reading the
 * saved format back (with the check that it holds the type asked for),
 * save(path) and load(path), pickling, and the notebook view. */
#ifndef LB_PY_SAVELOAD_H
#define LB_PY_SAVELOAD_H

#include "state.h"
#include "format.h"

/* Buffers of at least this many bytes are checked and copied with the GIL
 * released (from_bytes of a large filter lets other threads run). */
#define LB_NOGIL_BYTES ((size_t)1 << 20)

/* Read the saved filter in data (bytes or any buffer; not str) into h, which
 * points into view.  CorruptFileError for data that is not a saved filter or
 * holds another kind than kind; 0 with view held (the caller releases it), or
 * -1 with an exception and nothing held. */
int lb_read_saved(lb_state *st, PyObject *data, Py_buffer *view, lb_format_header *h, int kind);

/* save(path) and load(path) in terms of to_bytes / from_bytes (the file's
 * atomic write and bounded read are the package's hooks, state.h). */
PyObject *lb_save(PyObject *self, PyObject *path);
PyObject *lb_load(PyObject *cls, PyObject *path);

/* __reduce__ for pickle: (type(self).from_bytes, (self.to_bytes(),)), and a
 * subclass instance's own attributes (its __dict__) as the state. */
PyObject *lb_reduce(PyObject *self, PyObject *unused);
/* __copy__: copy(), with a subclass instance's own attributes (its __dict__). */
PyObject *lb_dunder_copy(PyObject *self, PyObject *unused);

/* _repr_html_ for notebooks: the package's html hook (state.h) of self. */
PyObject *lb_repr_html(PyObject *self, PyObject *unused);

#endif
