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
