/* mapped.h: a saved MemoryFilter file mapped into memory and shared by the
 * processes that map it (MemoryFilter.open).
 *
 * The file is the saved-filter format (format.h) of a memory filter: the bits
 * are its payload, at byte 40 of the mapping.  A file that processes add to is
 * "live" (the header's live flag): its trailer checksums the header only, so
 * adds need not rewrite it; load() and from_bytes() read such a file as they
 * read any other.  Every check of lb_format_read happens before a filter is
 * built over the mapping: the length against the header, first (read with
 * pread, before anything is mapped), then the whole file.
 *
 * POSIX only (open, mmap, msync, rename, link).  Errors: LB_ERR_FORMAT with a
 * reason in *why (not a memory filter's file, or a damaged one), or
 * LB_ERR_BACKEND with errno in *err (the system refused: no such file,
 * permission, disk full).  A file truncated by another program while mapped
 * makes a later access fault (SIGBUS): replace a file by renaming over it,
 * never by truncating or rewriting it in place. */
#ifndef LB_MAPPED_H
#define LB_MAPPED_H

#include "common.h"
#include "format.h"

typedef struct {
    uint8_t *base;      /* the whole file */
    size_t len;
    int writable;       /* mapped PROT_WRITE (mode r+, w, x) */
    lb_format_header h; /* the file's header; h.payload points into base */
} lb_mapping;

/* Map an existing file, read-only or read-write.  A writable mapping of a
 * sealed file (one save() wrote: its checksum covers the bits) is checked
 * whole, then marked live in place, under the file's lock (flock, exclusive);
 * every open confirms its check under that lock (shared by a reader), so an
 * open at the moment another marks the file sees it sealed or live, never
 * half marked.  The lock is held for a few bytes' reading or writing, never
 * for a whole checksum. */
lb_status lb_map_open(const char *path, int writable, lb_mapping *mp, int *err,
                      const char **why);

/* Create a live file for the filter h describes (its payload zero), mapped
 * read-write: written under a temporary name in path's directory with the
 * given mode bits, flushed, then renamed over path (processes that mapped the
 * old file keep it) or, with exclusive, linked to path (EEXIST when path
 * exists). */
lb_status lb_map_create(const char *path, const lb_format_header *h, int exclusive,
                        unsigned mode_bits, lb_mapping *mp, int *err);

/* Write the mapping's dirty pages to the file (msync). */
lb_status lb_map_sync(lb_mapping *mp, int *err);

void lb_map_close(lb_mapping *mp);

#endif
