/* args.h: reading the arguments of constructors and functions: hash names,
 * numbers in the one wording every type uses, and the geometry of a
 * fixed-size filter. */
#ifndef LB_PY_ARGS_H
#define LB_PY_ARGS_H

#include "state.h"

/* Parse a hash= argument (None or "xxh3" or "ling-base"). */
int lb_parse_hash(PyObject *obj, lb_hash_scheme *out);

/* A wrong-typed number argument, in the one wording every type uses:
 * TypeError "<type_name>: <what> must be a number, not <type of obj>" ("not
 * None" for None; no "<type_name>: " when type_name is NULL).  Returns -1. */
int lb_arg_type_error(const char *type_name, const char *what, PyObject *obj);

/* A number argument given as None: lb_arg_type_error (-1), never a silent
 * default; 0 for anything else. */
int lb_none_given(const char *type_name, const char *what, PyObject *obj);

/* Read a non-negative Python int (or a float that is a whole number) into a
 * uint64: exc, with what naming the argument, for a negative, fractional or
 * too large value; lb_arg_type_error for anything not a number (None, bool,
 * str, ...).  lb_parse_u64 is lb_parse_u64_arg of no type name. */
int lb_parse_u64_arg(const char *type_name, PyObject *obj, const char *what, PyObject *exc,
                     uint64_t *out);
int lb_parse_u64(PyObject *obj, const char *what, PyObject *exc, uint64_t *out);

/* A real number argument (a float, an int, anything with __float__; not a
 * bool, not None): lb_arg_type_error otherwise.  The range is the caller's. */
int lb_parse_double_arg(const char *type_name, PyObject *obj, const char *what, double *out);

/* error_rate: a real number in (0, 1), InvalidFalsePositiveRateError otherwise. */
int lb_parse_rate(lb_state *st, const char *type_name, PyObject *obj, double *out);

/* k, which must be in 1..LB_MAX_K: InvalidCapacityError otherwise. */
int lb_parse_k(lb_state *st, const char *type_name, PyObject *obj, uint64_t *out);


/* The geometry arguments shared by MemoryFilter and CountingFilter:
 * (capacity, error_rate) or (m=, k=), and hash=. */
typedef struct {
    uint64_t m;
    uint32_t k;
    lb_hash_scheme scheme;
    int has_capacity;
    uint64_t capacity;
    double error_rate;
} lb_fixed_args;

/* capacity (required: TypeError "TYPE needs capacity (and error_rate), or m and k")
 * and error_rate (default 0.01) into out->capacity and out->error_rate. */
int lb_parse_capacity_rate(lb_state *st, PyObject *capacity, PyObject *error_rate,
                           const char *type_name, lb_fixed_args *out);

int lb_parse_fixed_args(lb_state *st, PyObject *args, PyObject *kwargs, const char *type_name,
                        lb_fixed_args *out);
/* The same from objects (NULL = not given; None is a TypeError).  For filters
 * that may adopt a stored geometry, allow_none takes None as "not given" (but
 * not error_rate=None beside a capacity) and lets all four be absent: then 1
 * is returned and out holds only the hash. */
int lb_fixed_args_from(lb_state *st, PyObject *capacity, PyObject *error_rate, PyObject *m,
                       PyObject *k, PyObject *hash, const char *type_name, int allow_none,
                       lb_fixed_args *out);

#endif
