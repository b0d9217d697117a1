/*
 * The worker's strict JSON parser (see json.h). Recursive descent over a bounded input, depth-limited.
 */
#include "json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Deeper nesting than any request needs is refused rather than recursed into. */
#define MAX_DEPTH 256

struct parser {
  const uint8_t *p;
  const uint8_t *end;
  struct json_doc *doc;
  uint32_t max_nodes;
  bool too_many;
};

static void skip_ws(struct parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static uint32_t new_node(struct parser *ps, uint8_t type) {
  struct json_doc *doc = ps->doc;
  if (doc->count >= ps->max_nodes) {
    ps->too_many = true;
    return UINT32_MAX;
  }
  if (doc->count == doc->capacity) {
    uint32_t capacity = doc->capacity ? doc->capacity * 2 : 64;
    if (capacity > ps->max_nodes) capacity = ps->max_nodes;
    struct json_node *nodes = realloc(doc->nodes, capacity * sizeof *nodes);
    if (nodes == NULL) return UINT32_MAX;
    doc->nodes = nodes;
    doc->capacity = capacity;
  }
  struct json_node *node = &doc->nodes[doc->count];
  memset(node, 0, sizeof *node);
  node->type = type;
  return doc->count++;
}

/* Length of the valid UTF-8 sequence at p (1-4), or 0 if it is not one (overlong, surrogate, > U+10FFFF). */
static int utf8_sequence(const uint8_t *p, const uint8_t *end) {
  uint8_t c = p[0];
  if (c < 0x80) return 1;
  int n;
  uint8_t lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (end - p < n) return 0;
  if (p[1] < lo || p[1] > hi) return 0;
  for (int i = 2; i < n; i++) {
    if (p[i] < 0x80 || p[i] > 0xbf) return 0;
  }
  return n;
}

static int hex4(const uint8_t *p, const uint8_t *end) {
  if (end - p < 4) return -1;
  int value = 0;
  for (int i = 0; i < 4; i++) {
    uint8_t c = p[i];
    int digit;
    if (c >= '0' && c <= '9') digit = c - '0';
    else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    else return -1;
    value = value * 16 + digit;
  }
  return value;
}

static char *put_utf8(char *out, uint32_t cp) {
  if (cp < 0x80) {
    *out++ = (char)cp;
  } else if (cp < 0x800) {
    *out++ = (char)(0xc0 | (cp >> 6));
    *out++ = (char)(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *out++ = (char)(0xe0 | (cp >> 12));
    *out++ = (char)(0x80 | ((cp >> 6) & 0x3f));
    *out++ = (char)(0x80 | (cp & 0x3f));
  } else {
    *out++ = (char)(0xf0 | (cp >> 18));
    *out++ = (char)(0x80 | ((cp >> 12) & 0x3f));
    *out++ = (char)(0x80 | ((cp >> 6) & 0x3f));
    *out++ = (char)(0x80 | (cp & 0x3f));
  }
  return out;
}

/*
 * Decodes the string at ps->p (on its opening quote) into the arena; its offset and length go to *offset and
 * *length. The decoded form is never longer than the quoted source, so the arena (input length + 1) has room.
 */
static bool parse_string(struct parser *ps, uint32_t *offset, uint32_t *length, bool *has_nul) {
  struct json_doc *doc = ps->doc;
  char *start = doc->arena + doc->arena_len;
  char *out = start;
  *has_nul = false;
  ps->p++; /* the quote */
  while (true) {
    if (ps->p >= ps->end) return false;
    uint8_t c = *ps->p;
    if (c == '"') {
      ps->p++;
      break;
    }
    if (c < 0x20) return false;
    if (c == '\\') {
      if (ps->end - ps->p < 2) return false;
      uint8_t e = ps->p[1];
      ps->p += 2;
      switch (e) {
      case '"': *out++ = '"'; break;
      case '\\': *out++ = '\\'; break;
      case '/': *out++ = '/'; break;
      case 'b': *out++ = '\b'; break;
      case 'f': *out++ = '\f'; break;
      case 'n': *out++ = '\n'; break;
      case 'r': *out++ = '\r'; break;
      case 't': *out++ = '\t'; break;
      case 'u': {
        int unit = hex4(ps->p, ps->end);
        if (unit < 0) return false;
        ps->p += 4;
        uint32_t cp = (uint32_t)unit;
        if (unit >= 0xd800 && unit <= 0xdbff && ps->end - ps->p >= 6 && ps->p[0] == '\\' && ps->p[1] == 'u') {
          int low = hex4(ps->p + 2, ps->end);
          if (low >= 0xdc00 && low <= 0xdfff) {
            cp = 0x10000 + (((uint32_t)unit - 0xd800) << 10) + ((uint32_t)low - 0xdc00);
            ps->p += 6;
          }
        }
        if (cp >= 0xd800 && cp <= 0xdfff) cp = 0xfffd; /* a lone surrogate, as a runtime encodes it */
        if (cp == 0) *has_nul = true;
        out = put_utf8(out, cp);
        break;
      }
      default:
        return false;
      }
      continue;
    }
    int n = utf8_sequence(ps->p, ps->end);
    if (n == 0) return false;
    memcpy(out, ps->p, (size_t)n);
    out += n;
    ps->p += n;
  }
  *out++ = '\0';
  *offset = (uint32_t)doc->arena_len;
  *length = (uint32_t)(out - start - 1);
  doc->arena_len += (size_t)(out - start);
  return true;
}

static bool parse_number(struct parser *ps, double *value) {
  const uint8_t *start = ps->p;
  const uint8_t *p = ps->p;
  if (p < ps->end && *p == '-') p++;
  if (p >= ps->end) return false;
  if (*p == '0') {
    p++;
  } else if (*p >= '1' && *p <= '9') {
    while (p < ps->end && *p >= '0' && *p <= '9') p++;
  } else {
    return false;
  }
  if (p < ps->end && *p == '.') {
    p++;
    if (p >= ps->end || *p < '0' || *p > '9') return false;
    while (p < ps->end && *p >= '0' && *p <= '9') p++;
  }
  if (p < ps->end && (*p == 'e' || *p == 'E')) {
    p++;
    if (p < ps->end && (*p == '+' || *p == '-')) p++;
    if (p >= ps->end || *p < '0' || *p > '9') return false;
    while (p < ps->end && *p >= '0' && *p <= '9') p++;
  }
  size_t len = (size_t)(p - start);
  char small[64];
  char *copy = len < sizeof small ? small : malloc(len + 1);
  if (copy == NULL) return false;
  memcpy(copy, start, len);
  copy[len] = '\0';
  *value = strtod(copy, NULL); /* the C locale: the worker never calls setlocale */
  if (copy != small) free(copy);
  ps->p = p;
  return true;
}

static bool literal(struct parser *ps, const char *word) {
  size_t len = strlen(word);
  if ((size_t)(ps->end - ps->p) < len || memcmp(ps->p, word, len) != 0) return false;
  ps->p += len;
  return true;
}

static uint32_t parse_value(struct parser *ps, int depth);

/* Parses the members or elements of an object or array (ps->p on its opening bracket) into node `index`. */
static bool parse_container(struct parser *ps, uint32_t index, bool object, int depth) {
  uint8_t close = object ? '}' : ']';
  ps->p++;
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == close) {
    ps->p++;
    return true;
  }
  uint32_t last = 0;
  while (true) {
    uint32_t key = 0, key_len = 0;
    bool key_nul = false;
    if (object) {
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != '"') return false;
      if (!parse_string(ps, &key, &key_len, &key_nul)) return false;
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != ':') return false;
      ps->p++;
    }
    uint32_t child = parse_value(ps, depth + 1);
    if (child == UINT32_MAX) return false;
    struct json_node *node = &ps->doc->nodes[child];
    node->key = key;
    node->key_len = key_len;
    node->key_has_nul = key_nul;
    if (last == 0) ps->doc->nodes[index].first = child;
    else ps->doc->nodes[last].next = child;
    last = child;
    skip_ws(ps);
    if (ps->p >= ps->end) return false;
    if (*ps->p == ',') {
      ps->p++;
      continue;
    }
    if (*ps->p != close) return false;
    ps->p++;
    return true;
  }
}

static uint32_t parse_value(struct parser *ps, int depth) {
  if (depth > MAX_DEPTH) return UINT32_MAX;
  skip_ws(ps);
  if (ps->p >= ps->end) return UINT32_MAX;
  uint8_t c = *ps->p;
  uint32_t index;
  switch (c) {
  case '{':
  case '[':
    index = new_node(ps, c == '{' ? JSON_OBJECT : JSON_ARRAY);
    if (index == UINT32_MAX || !parse_container(ps, index, c == '{', depth)) return UINT32_MAX;
    return index;
  case '"': {
    index = new_node(ps, JSON_STRING);
    if (index == UINT32_MAX) return UINT32_MAX;
    uint32_t offset, length;
    bool nul;
    if (!parse_string(ps, &offset, &length, &nul)) return UINT32_MAX;
    ps->doc->nodes[index].str = offset;
    ps->doc->nodes[index].str_len = length;
    ps->doc->nodes[index].has_nul = nul;
    return index;
  }
  case 't':
    return literal(ps, "true") ? new_node(ps, JSON_TRUE) : UINT32_MAX;
  case 'f':
    return literal(ps, "false") ? new_node(ps, JSON_FALSE) : UINT32_MAX;
  case 'n':
    return literal(ps, "null") ? new_node(ps, JSON_NULL) : UINT32_MAX;
  default: {
    double number;
    if (!parse_number(ps, &number)) return UINT32_MAX;
    index = new_node(ps, JSON_NUMBER);
    if (index != UINT32_MAX) ps->doc->nodes[index].number = number;
    return index;
  }
  }
}

bool json_parse(struct json_doc *doc, const uint8_t *text, size_t len) {
  bool too_many;
  return json_parse_max(doc, text, len, UINT32_MAX - 1, &too_many);
}

bool json_parse_max(struct json_doc *doc, const uint8_t *text, size_t len, uint32_t max_nodes, bool *too_many) {
  memset(doc, 0, sizeof *doc);
  *too_many = false;
  if (len > UINT32_MAX / 2) return false;
  /* A fatal UTF-8 decoder drops a leading byte-order mark before JSON.parse sees the text. */
  if (len >= 3 && text[0] == 0xef && text[1] == 0xbb && text[2] == 0xbf) {
    text += 3;
    len -= 3;
  }
  doc->arena = malloc(len + 1);
  if (doc->arena == NULL) return false;
  struct parser ps = {text, text + len, doc, max_nodes, false};
  uint32_t root = parse_value(&ps, 0);
  skip_ws(&ps);
  if (root != 0 || ps.p != ps.end) {
    *too_many = ps.too_many;
    json_free(doc);
    return false;
  }
  return true;
}

void json_free(struct json_doc *doc) {
  free(doc->nodes);
  free(doc->arena);
  memset(doc, 0, sizeof *doc);
}

const struct json_node *json_get(const struct json_doc *doc, const struct json_node *object, const char *name) {
  const struct json_node *found = NULL;
  size_t len = strlen(name);
  for (const struct json_node *m = json_first(doc, object); m != NULL; m = json_next(doc, m)) {
    if (m->key_len == len && memcmp(json_key(doc, m), name, len) == 0) found = m;
  }
  return found;
}

bool json_truthy(const struct json_node *node) {
  switch (node->type) {
  case JSON_NULL:
  case JSON_FALSE:
    return false;
  case JSON_NUMBER:
    return node->number != 0 && !isnan(node->number);
  case JSON_STRING:
    return node->str_len > 0;
  default:
    return true;
  }
}
