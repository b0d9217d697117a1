/* Memory: allocation that stops the worker when memory runs out, and the growable byte buffer. */
#include "worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *xrealloc(void *p, size_t size) {
  void *q = realloc(p, size ? size : 1);
  if (q == NULL) {
    fprintf(stderr, "spawnpool worker: out of memory; closing\n");
    stop(1);
  }
  return q;
}

void buf_reserve(struct buf *b, size_t extra) {
  if (b->cap - b->len >= extra) return;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap - b->len < extra) cap *= 2;
  b->data = xrealloc(b->data, cap);
  b->cap = cap;
}

void buf_put(struct buf *b, const void *p, size_t n) {
  buf_reserve(b, n);
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
}

void buf_free(struct buf *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}

/*
 * Spare output buffers. A buffered command's first read goes into a spare (streams.c collect: kept as its buffer when
 * the read was large, copied out when small); its next reads go straight into its buffer, which moves into a larger
 * spare if there is one, so a large output neither grows by copying at each doubling nor makes the allocator map,
 * page-fault and unmap a fresh region each time. Buffers of SPARE_MIN_BYTES to SPARE_MAX_BYTES come back here once
 * written to the host (channel.c) or when their job is freed; at most SPARE_COUNT (2 MB).
 */
#define SPARE_COUNT 8
#define SPARE_MIN_BYTES (128 * 1024)
#define SPARE_MAX_BYTES (256 * 1024)
static struct buf spares[SPARE_COUNT];
static int spare_count;

void buf_reserve_output(struct buf *b) {
  if (b->cap - b->len >= OUTPUT_READ_BYTES) return;
  struct buf *top = spare_count > 0 ? &spares[spare_count - 1] : NULL;
  if (top != NULL && top->cap > b->cap && top->cap - b->len >= OUTPUT_READ_BYTES) {
    struct buf spare = spares[--spare_count];
    if (b->len) memcpy(spare.data, b->data, b->len);
    spare.len = b->len;
    buf_free(b);
    *b = spare;
    return;
  }
  buf_reserve(b, OUTPUT_READ_BYTES);
}

void buf_take_spare(struct buf *b) {
  if (spare_count > 0) {
    *b = spares[--spare_count];
    b->len = 0;
    return;
  }
  buf_reserve(b, SPARE_MAX_BYTES);
}

void buf_release(struct buf *b) {
  if (b->cap >= SPARE_MIN_BYTES && b->cap <= SPARE_MAX_BYTES && spare_count < SPARE_COUNT) {
    spares[spare_count++] = *b;
    memset(b, 0, sizeof *b);
  } else {
    buf_free(b);
  }
}
