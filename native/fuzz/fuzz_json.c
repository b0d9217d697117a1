/*
 * libFuzzer harness of the worker's JSON parser (native/json.c) and of its validation of spawn requests
 * (native/host_frames.c valid_request()): arbitrary bytes as a Spawn frame's payload, without the frame around them.
 *
 * Besides the sanitizers, it checks what the worker relies on:
 *   - a parsed document is a tree in document order (each child and sibling after its parent), every node reached
 *     once from the root, every string and member name NUL-terminated inside the arena, its NUL flag right, and the
 *     arena no longer than the input (the parser's own bound: json.c parse_string());
 *   - strings are valid UTF-8; a number is never NaN; json_get() finds the last member of a name;
 *   - json_parse_max() with exactly as many nodes as the document has gives the same document, with one less it stops
 *     with too_many set; and one that fails for json_parse() fails at any limit;
 *   - the document written back as JSON parses to the same nodes and arena, byte for byte;
 *   - a request that valid_request() accepts has every field on_spawn() and start_job() read without a check.
 * No worker code here exits or spawns: the stubs (stubs.c) are linked, but never reached.
 */
#include "../host_frames.c"

#include "fuzz.h"

static void check_string(const struct json_doc *doc, uint32_t offset, uint32_t len, bool has_nul, const char *what) {
  if ((size_t)offset + len >= doc->arena_len) fuzz_fail("%s at %u (%u bytes) past the arena", what, offset, len);
  const uint8_t *s = (const uint8_t *)doc->arena + offset;
  if (s[len] != '\0') fuzz_fail("%s at %u is not NUL-terminated", what, offset);
  if ((memchr(s, 0, len) != NULL) != has_nul) fuzz_fail("%s at %u: wrong NUL flag", what, offset);
  /* UTF-8: no overlong form, no surrogate, nothing past U+10FFFF. */
  for (uint32_t i = 0; i < len;) {
    uint8_t c = s[i];
    uint32_t n = c < 0x80                 ? 1
                 : c >= 0xc2 && c <= 0xdf ? 2
                 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xf0 && c <= 0xf4 ? 4
                                          : 0;
    if (n == 0 || i + n > len) fuzz_fail("%s at %u: invalid UTF-8 at byte %u", what, offset, i);
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1fu : n == 3 ? c & 0x0fu : c & 0x07u;
    for (uint32_t k = 1; k < n; k++) {
      if ((s[i + k] & 0xc0) != 0x80) fuzz_fail("%s at %u: invalid UTF-8 at byte %u", what, offset, i);
      cp = cp << 6 | (s[i + k] & 0x3fu);
    }
    uint32_t least = n == 2 ? 0x80 : n == 3 ? 0x800 : n == 4 ? 0x10000 : 0;
    if (cp < least || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      fuzz_fail("%s at %u: invalid code point U+%04X", what, offset, cp);
    }
    i += n;
  }
}

static void check_doc(const struct json_doc *doc, size_t input_len) {
  if (doc->count == 0 || doc->count > doc->capacity) fuzz_fail("%u nodes, room for %u", doc->count, doc->capacity);
  if (doc->arena_len > input_len + 1) fuzz_fail("arena of %zu bytes for %zu bytes of input", doc->arena_len, input_len);
  uint32_t reached = 1; /* the root */
  for (uint32_t i = 0; i < doc->count; i++) {
    const struct json_node *n = &doc->nodes[i];
    if (n->type > JSON_OBJECT) fuzz_fail("node %u: type %u", i, n->type);
    if (n->next != 0 && (n->next <= i || n->next >= doc->count)) fuzz_fail("node %u: next %u", i, n->next);
    if (n->type == JSON_ARRAY || n->type == JSON_OBJECT) {
      if (n->first != 0 && (n->first <= i || n->first >= doc->count)) fuzz_fail("node %u: first %u", i, n->first);
      for (const struct json_node *c = json_first(doc, n); c != NULL; c = json_next(doc, c)) {
        reached++;
        if (n->type == JSON_OBJECT) {
          check_string(doc, c->key, c->key_len, c->key_has_nul, "member name");
          /* json_get() of a name with no NUL inside finds the last member so named. */
          if (c->key_has_nul) continue;
          const struct json_node *found = json_get(doc, n, json_key(doc, c));
          const struct json_node *last = c;
          for (const struct json_node *d = json_next(doc, c); d != NULL; d = json_next(doc, d)) {
            if (d->key_len == c->key_len && memcmp(json_key(doc, d), json_key(doc, c), c->key_len) == 0) last = d;
          }
          if (found != last) fuzz_fail("json_get(\"%s\") found node %td, not %td", json_key(doc, c),
                                       found ? found - doc->nodes : -1, last - doc->nodes);
        } else if (c->key_len != 0 || c->key_has_nul) {
          fuzz_fail("array element %td has a member name", c - doc->nodes);
        }
      }
    } else if (n->first != 0) {
      fuzz_fail("node %u: a %u with children", i, n->type);
    }
    if (n->type == JSON_STRING) check_string(doc, n->str, n->str_len, n->has_nul, "string");
    if (n->type == JSON_NUMBER && isnan(n->number)) fuzz_fail("node %u: NaN", i);
    (void)json_truthy(n);
  }
  if (reached != doc->count) fuzz_fail("%u nodes reached from the root of %u", reached, doc->count);
}

static bool same_doc(const struct json_doc *a, const struct json_doc *b) {
  /* Nodes are zeroed before they are set (new_node()): padding included, equal documents are equal bytes. */
  return a->count == b->count && a->arena_len == b->arena_len &&
         memcmp(a->nodes, b->nodes, a->count * sizeof a->nodes[0]) == 0 &&
         memcmp(a->arena, b->arena, a->arena_len) == 0;
}

static void put_string(struct buf *t, const char *s, size_t len) {
  buf_put(t, "\"", 1);
  for (size_t i = 0; i < len; i++) {
    uint8_t c = (uint8_t)s[i];
    char esc[8];
    if (c == '"' || c == '\\') {
      esc[0] = '\\';
      esc[1] = (char)c;
      buf_put(t, esc, 2);
    } else if (c < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", c);
      buf_put(t, esc, 6);
    } else {
      buf_put(t, (const char *)&s[i], 1);
    }
  }
  buf_put(t, "\"", 1);
}

/* Writes node `n` back as JSON (strings as their UTF-8, numbers with 17 digits: strtod reads back the same double). */
static void write_json(struct buf *t, const struct json_doc *doc, const struct json_node *n) {
  char number[40];
  switch (n->type) {
  case JSON_NULL: buf_put(t, "null", 4); break;
  case JSON_FALSE: buf_put(t, "false", 5); break;
  case JSON_TRUE: buf_put(t, "true", 4); break;
  case JSON_NUMBER:
    if (isinf(n->number)) buf_put(t, n->number > 0 ? "1e999" : "-1e999", n->number > 0 ? 5 : 6);
    else buf_put(t, number, (size_t)snprintf(number, sizeof number, "%.17g", n->number));
    break;
  case JSON_STRING: put_string(t, json_str(doc, n), n->str_len); break;
  case JSON_ARRAY:
  case JSON_OBJECT: {
    bool object = n->type == JSON_OBJECT;
    buf_put(t, object ? "{" : "[", 1);
    for (const struct json_node *c = json_first(doc, n); c != NULL; c = json_next(doc, c)) {
      if (c != json_first(doc, n)) buf_put(t, ",", 1);
      if (object) {
        put_string(t, json_key(doc, c), c->key_len);
        buf_put(t, ":", 1);
      }
      write_json(t, doc, c);
    }
    buf_put(t, object ? "}" : "]", 1);
    break;
  }
  }
}

/* What on_spawn() and start_job() (native/spawn.c) read of an accepted request without looking first. */
static void check_request(const struct json_doc *doc) {
  const struct json_node *root = &doc->nodes[0];
  static const char *const required[] = {"cmd",    "args",     "stdin",      "stdout",              "stderr",
                                         "buffered", "killSignal", "forceKillAfterDelay", "window", "group"};
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
    if (json_get(doc, root, required[i]) == NULL) {
      fuzz_fail("valid_request() accepted a request without %s", required[i]);
    }
  }
  static const char *const modes[] = {"stdin", "stdout", "stderr"};
  for (size_t i = 0; i < 3; i++) {
    const struct json_node *n = json_get(doc, root, modes[i]);
    if (n->type != JSON_STRING) fuzz_fail("valid_request() accepted a %s that is no string", modes[i]);
  }
  const struct json_node *kill_signal = json_get(doc, root, "killSignal");
  (void)signal_number(json_str(doc, kill_signal), kill_signal->str_len);
  const struct json_node *clear = json_get(doc, root, "clearEnv");
  if (clear != NULL) (void)json_truthy(clear);
  /* A terminal's size is read as an unsigned int, and its command's stdout and stderr as "piped" and "null". */
  const struct json_node *terminal = json_get(doc, root, "terminal");
  if (terminal != NULL) {
    static const char *const sizes[] = {"cols", "rows"};
    for (size_t i = 0; i < 2; i++) {
      const struct json_node *n = json_get(doc, terminal, sizes[i]);
      if (n == NULL || n->type != JSON_NUMBER || !(n->number >= 1 && n->number <= 65535)) {
        fuzz_fail("valid_request() accepted a terminal whose %s is no size", sizes[i]);
      }
    }
    if (strcmp(json_str(doc, json_get(doc, root, "stdout")), "piped") != 0) {
      fuzz_fail("valid_request() accepted a terminal whose stdout is not piped");
    }
  }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_quiet_worker();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct json_doc doc, again;
  bool too_many;
  if (!json_parse(&doc, data, size)) {
    if (json_parse_max(&again, data, size, UINT32_MAX - 1, &too_many) || too_many) {
      fuzz_fail("json_parse() failed, json_parse_max() at its largest limit did not fail alike");
    }
    /* A limit can only make it fail sooner. */
    if (json_parse_max(&again, data, size, 1 + (uint32_t)(size % 64), &too_many)) {
      fuzz_fail("json_parse() failed, json_parse_max() succeeded");
    }
    return 0;
  }
  check_doc(&doc, size);
  if (!json_parse_max(&again, data, size, doc.count, &too_many)) {
    fuzz_fail("json_parse_max() refused a document of %u nodes at a limit of %u", doc.count, doc.count);
  }
  if (!same_doc(&doc, &again)) fuzz_fail("json_parse_max() parsed another document than json_parse()");
  json_free(&again);
  if (doc.count > 1) {
    if (json_parse_max(&again, data, size, doc.count - 1, &too_many) || !too_many) {
      fuzz_fail("json_parse_max() at a limit of %u did not stop at node %u", doc.count - 1, doc.count);
    }
  }
  struct buf written = {0};
  write_json(&written, &doc, &doc.nodes[0]);
  if (!json_parse(&again, written.data, written.len)) {
    fuzz_fail("the document written back does not parse: %.*s", (int)(written.len > 200 ? 200 : written.len),
              (const char *)written.data);
  }
  if (!same_doc(&doc, &again)) {
    fuzz_fail("the document written back parses to another: %.*s", (int)(written.len > 200 ? 200 : written.len),
              (const char *)written.data);
  }
  json_free(&again);
  free(written.data);
  if (doc.nodes[0].type == JSON_OBJECT && valid_request(&doc)) check_request(&doc);
  json_free(&doc);
  return 0;
}
