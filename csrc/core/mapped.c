/* mapped.c: see mapped.h. */
#include "mapped.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define WHY(reason)          \
    do {                     \
        *why = (reason);     \
        st = LB_ERR_FORMAT;  \
        goto fail;           \
    } while (0)

static lb_status sys_fail(int *err)
{
    *err = errno ? errno : EIO;
    return LB_ERR_BACKEND;
}

static int pread_all(int fd, uint8_t *buf, size_t n, off_t at)
{
    while (n) {
        ssize_t r = pread(fd, buf, n, at);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? -1 : 0;
        buf += r, n -= (size_t)r, at += r;
    }
    return 1;
}

static int pwrite_all(int fd, const uint8_t *buf, size_t n, off_t at)
{
    while (n) {
        ssize_t r = pwrite(fd, buf, n, at);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        buf += r, n -= (size_t)r, at += r;
    }
    return 0;
}

/* The file's lock (flock) orders the checks of an open with the marking of a
 * sealed file live, which writes its header and trailer in place: a writer
 * ("r+") marks the file only while it holds the lock exclusively, and an open
 * confirms what its check found while it holds the lock (shared by a reader).
 * The lock is held for the few bytes of that confirmation and of the marking,
 * never for a whole checksum, so a stream of readers cannot keep a writer
 * waiting.  Advisory, and taken by ling_bloom's opens only (load() confirms
 * its read the same way).  Where the file system has no locks (ENOLCK,
 * EOPNOTSUPP ...) the open goes on without one: the confirmation still sees a
 * file marked since its check, unless it reads the header in the instant
 * between the marking's two writes.  Released with LOCK_UN, not by close()
 * alone: a process forked meanwhile by another thread shares the descriptor,
 * and would hold the lock for as long as it lives. */
static void lock_file(int fd, int how)
{
    while (flock(fd, how) < 0 && errno == EINTR)
        ;
}

static int header_live(const uint8_t *base)
{
    lb_format_header h;
    const char *why;
    return lb_format_peek(base, LB_FORMAT_FIXED_HEADER, &h, &why) == LB_OK &&
           h.kind == LB_KIND_MEMORY && h.live;
}

lb_status lb_map_open(const char *path, int writable, lb_mapping *mp, int *err,
                      const char **why)
{
    lb_status st = LB_OK;
    memset(mp, 0, sizeof(*mp));
    *err = 0;
    *why = NULL;
    int fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0)
        return sys_fail(err);
    struct stat sb;
    if (fstat(fd, &sb) < 0) {
        st = sys_fail(err);
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        errno = S_ISDIR(sb.st_mode) ? EISDIR : EINVAL;
        st = sys_fail(err);
        goto fail;
    }
    /* The header first: the file must be as long as it says before a byte of
     * it is mapped (a short file would fault on access). */
    uint8_t head[LB_FORMAT_SCALABLE_HEADER];
    size_t headlen = (uint64_t)sb.st_size < sizeof(head) ? (size_t)sb.st_size : sizeof(head);
    int r = pread_all(fd, head, headlen, 0);
    if (r < 0) {
        st = sys_fail(err);
        goto fail;
    }
    if (r == 0 && headlen)
        WHY("the file shrank while it was read");
    uint64_t total;
    int whole;
    if (lb_format_length(head, headlen, (uint64_t)sb.st_size, &total, &whole, why) != LB_OK) {
        st = LB_ERR_FORMAT;
        goto fail;
    }
    lb_format_header peek;
    if (lb_format_peek(head, headlen, &peek, why) != LB_OK || peek.kind != LB_KIND_MEMORY)
        WHY("open() maps MemoryFilter files only (load() reads the other kinds)");
    if (!whole || (uint64_t)sb.st_size != total)
        WHY("the file's length does not match its header (truncated or extended)");
    if (total > SIZE_MAX)
        WHY("too large to map");
    void *base = mmap(NULL, (size_t)total, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED,
                      fd, 0);
    if (base == MAP_FAILED) {
        st = sys_fail(err);
        goto fail;
    }
    mp->base = base;
    mp->len = (size_t)total;
    mp->writable = writable;
    /* The check, without the lock: a sealed file's checksum reads it whole. */
    int ok = lb_format_read(mp->base, mp->len, &mp->h, why) == LB_OK;
    lock_file(fd, writable ? LOCK_EX : LOCK_SH);
    /* A file marked live never goes back, and it is marked only under the
     * lock: a header that is not live now was not marked during the check,
     * whose answer stands.  One that is live now may have been marked during
     * it, so a check that failed, or that found the file sealed, is done
     * again, on the live file it is now (its header alone: cheap).  A damaged
     * file fails that check too (a damaged sealed one is checked once). */
    if (header_live(mp->base) && (!ok || !mp->h.live))
        ok = lb_format_read(mp->base, mp->len, &mp->h, why) == LB_OK;
    if (!ok) {
        lock_file(fd, LOCK_UN);
        close(fd);
        lb_map_close(mp);
        return LB_ERR_FORMAT;
    }
    if (writable && !mp->h.live) {
        /* A sealed file opened to be added to: from now on its bits change
         * under any checksum of them, so it becomes live. */
        mp->h.live = 1;
        lb_format_write_live(mp->base, mp->base + mp->len - LB_FORMAT_TRAILER, &mp->h);
    }
    lock_file(fd, LOCK_UN);
    close(fd);
    return LB_OK;
fail:
    if (fd >= 0) {
        int saved = errno;
        close(fd);
        errno = saved;
    }
    return st;
}

lb_status lb_map_create(const char *path, const lb_format_header *h, int exclusive,
                        unsigned mode_bits, lb_mapping *mp, int *err)
{
    memset(mp, 0, sizeof(*mp));
    *err = 0;
    if (h->kind != LB_KIND_MEMORY) {
        *err = EINVAL;
        return LB_ERR_BACKEND;
    }
    uint64_t payload = (h->m + 7) / 8;
    uint64_t total = LB_FORMAT_FIXED_HEADER + payload + LB_FORMAT_TRAILER;
    if (total > SIZE_MAX || total > (uint64_t)LLONG_MAX) {
        *err = EFBIG;
        return LB_ERR_BACKEND;
    }
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    if (!tmp)
        return LB_ERR_NOMEM;
    /* The temporary name sits in path's directory, so the rename is atomic. */
    const char *slash = strrchr(path, '/');
    size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
    memcpy(tmp, path, dirlen);
    strcpy(tmp + dirlen, ".ling_bloom-XXXXXX");
    int fd = mkstemp(tmp);
    if (fd < 0) {
        lb_status s = sys_fail(err);
        free(tmp);
        return s;
    }
    uint8_t header[LB_FORMAT_FIXED_HEADER], trailer[LB_FORMAT_TRAILER];
    lb_format_write_live(header, trailer, h);
    void *base = MAP_FAILED;
    /* The payload is the zeros ftruncate gives (a sparse file: disk blocks
     * come as bits are set). */
    if (fchmod(fd, mode_bits) < 0 || ftruncate(fd, (off_t)total) < 0 ||
        pwrite_all(fd, header, sizeof(header), 0) < 0 ||
        pwrite_all(fd, trailer, sizeof(trailer), (off_t)(total - LB_FORMAT_TRAILER)) < 0 ||
        fsync(fd) < 0)
        goto fail;
    base = mmap(NULL, (size_t)total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        goto fail;
    if (exclusive) {
        if (link(tmp, path) < 0)
            goto fail;
        unlink(tmp);
    } else if (rename(tmp, path) < 0) {
        goto fail;
    }
    close(fd);
    free(tmp);
    mp->base = base;
    mp->len = (size_t)total;
    mp->writable = 1;
    const char *why;
    if (lb_format_read(mp->base, mp->len, &mp->h, &why) != LB_OK) { /* cannot happen: it was just written so */
        lb_map_close(mp);
        *err = EIO;
        return LB_ERR_BACKEND;
    }
    return LB_OK;
fail:;
    lb_status s = sys_fail(err);
    if (base != MAP_FAILED)
        munmap(base, (size_t)total);
    close(fd);
    unlink(tmp);
    free(tmp);
    return s;
}

lb_status lb_map_sync(lb_mapping *mp, int *err)
{
    *err = 0;
    if (mp->base && mp->writable && msync(mp->base, mp->len, MS_SYNC) < 0)
        return sys_fail(err);
    return LB_OK;
}

void lb_map_close(lb_mapping *mp)
{
    if (mp->base)
        munmap(mp->base, mp->len);
    mp->base = NULL;
    mp->len = 0;
}
