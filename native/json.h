/*
 * A small, strict JSON parser for the worker's two inputs: spawn requests and the bootstrap (SPAWNPOOL_BOOTSTRAP).
 *
 * It accepts exactly what JSON.parse over a fatal UTF-8 decode accepts (a leading byte-order mark included):
 * anything else is an error, never a crash. Strings are decoded to UTF-8 (a lone surrogate becomes U+FFFD, as
 * a runtime encodes it) and kept NUL-terminated in one arena, with a flag when they contain a NUL of their own.
 */
#ifndef SPAWNPOOL_JSON_H
#define SPAWNPOOL_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum json_type { JSON_NULL, JSON_FALSE, JSON_TRUE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

/** A parsed value; children of arrays and objects are linked by index (0 ends a list: the root is node 0). */
struct json_node {
  uint8_t type;
  bool has_nul;       /* a string (or key) with a NUL byte inside */
  bool key_has_nul;
  uint32_t first;     /* first child, arrays and objects */
  uint32_t next;      /* next sibling */
  uint32_t key;       /* member name: offset in the arena */
  uint32_t key_len;
  uint32_t str;       /* string value: offset in the arena */
  uint32_t str_len;
  double number;
};

struct json_doc {
  struct json_node *nodes;
  uint32_t count;
  uint32_t capacity;
  char *arena;
  size_t arena_len;
};

/** Parses `len` bytes into `doc`; false (and `doc` freed) when they are not one valid JSON text. */
bool json_parse(struct json_doc *doc, const uint8_t *text, size_t len);
/**
 * json_parse of at most `max_nodes` values (nodes: a value or member each; at least 1): past them, it stops with
 * false and `*too_many` set, without reading the rest, so that a huge input cannot take memory in proportion.
 */
bool json_parse_max(struct json_doc *doc, const uint8_t *text, size_t len, uint32_t max_nodes, bool *too_many);
/** Frees what json_parse allocated. */
void json_free(struct json_doc *doc);
/** The last member called `name` of object node `object` (JSON.parse keeps the last of duplicates), or NULL. */
const struct json_node *json_get(const struct json_doc *doc, const struct json_node *object, const char *name);
/** The string of a string node. */
static inline const char *json_str(const struct json_doc *doc, const struct json_node *node) {
  return doc->arena + node->str;
}
/** A member's name. */
static inline const char *json_key(const struct json_doc *doc, const struct json_node *node) {
  return doc->arena + node->key;
}
/** The first child of an array or object, or NULL. */
static inline const struct json_node *json_first(const struct json_doc *doc, const struct json_node *node) {
  return node->first ? &doc->nodes[node->first] : NULL;
}
/** The next sibling, or NULL. */
static inline const struct json_node *json_next(const struct json_doc *doc, const struct json_node *node) {
  return node->next ? &doc->nodes[node->next] : NULL;
}
/** JavaScript truthiness of a value (false, 0, NaN, "" and null are falsy). */
bool json_truthy(const struct json_node *node);

#endif
