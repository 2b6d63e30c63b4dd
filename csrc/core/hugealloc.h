/* hugealloc.h: zeroed storage for the bit and counter arrays, on transparent
 * huge pages when it is large.
 *
 * A filter of several MiB is probed at random: with 4 KiB pages nearly every
 * probe also misses the TLB (a page walk on top of the cache miss).  From
 * LB_HUGE_MIN bytes on, the array is an anonymous mapping aligned to 2 MiB
 * with madvise(MADV_HUGEPAGE), as blocked.c maps its blocks (advice only: the
 * system may give 4 KiB pages still); the pages are zero and come as they are
 * touched.  Below it, or where the mapping fails, calloc.  Never for a mapped
 * file (mapped.c): only what lb_huge_zalloc returned goes to lb_huge_free. */
#ifndef LB_HUGEALLOC_H
#define LB_HUGEALLOC_H

#include <stdlib.h>

#include "common.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

#ifndef LB_HUGE_MIN
#define LB_HUGE_MIN ((size_t)4 << 20)
#endif
#define LB_HUGE_ALIGN ((size_t)2 << 20)

/* bytes zeroed bytes (at least 1), or NULL.  *raw_len is the mapping's length
 * (0: calloc'd), for lb_huge_free; *raw what to free. */
static inline void *lb_huge_zalloc(size_t bytes, void **raw, size_t *raw_len)
{
    *raw_len = 0;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes >= LB_HUGE_MIN && bytes <= SIZE_MAX - LB_HUGE_ALIGN) {
        size_t len = bytes + LB_HUGE_ALIGN;
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p != MAP_FAILED) {
            uintptr_t start = ((uintptr_t)p + LB_HUGE_ALIGN - 1) & ~(uintptr_t)(LB_HUGE_ALIGN - 1);
            (void)madvise((void *)start, bytes, MADV_HUGEPAGE); /* advice only */
            *raw = p;
            *raw_len = len;
            return (void *)start;
        }
    }
#endif
    *raw = calloc(bytes ? bytes : 1, 1);
    return *raw;
}

static inline void lb_huge_free(void *raw, size_t raw_len)
{
#if defined(__linux__)
    if (raw_len) {
        munmap(raw, raw_len);
        return;
    }
#endif
    (void)raw_len;
    free(raw);
}

#endif
