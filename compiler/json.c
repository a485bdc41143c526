/* json.c — a minimal, strict JSON reader (RFC 8259) into a Json DOM.
 *
 * Robust against malformed or hostile files: every error is one line with
 * the file, line and column ("snc: error: A.json: line 3, column 7: expected
 * ':' after an object key"), exit 2; nesting is limited (a deep file cannot
 * overflow the stack); strings with embedded NULs are rejected.
 *
 * Not here: writing JSON (the printers write their own), schemas, or any
 * JSON extension (comments, trailing commas, NaN).
 * Cost: linear in the file; object lookup is linear in its keys (plan.json
 * objects have at most 21). */
#include "json.h"

#include "snc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { JSON_MAX_DEPTH = 256 };

typedef struct Parser {
  const char *s, *p;       // the text, the cursor
  const char *what;        // file name for errors
  int depth;
} Parser;

static noreturn void perr(const Parser *ps, const char *msg) {
  int line = 1, col = 1;
  for (const char *q = ps->s; q < ps->p; q++) {
    if (*q == '\n') line++, col = 1;
    else col++;
  }
  fatal(EXIT_BADINPUT, "%s: line %d, column %d: %s%s", ps->what, line, col, msg,
        *ps->p ? "" : " (unexpected end of file: truncated?)");
}

static void skip_ws(Parser *ps) {
  while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r') ps->p++;
}

static void parse_value(Parser *ps, Json *v);

static int hex4(Parser *ps) {
  int v = 0;
  for (int k = 0; k < 4; k++) {
    char c = *ps->p;
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) perr(ps, "bad \\u escape (four hex digits expected)");
    v = v * 16 + d;
    ps->p++;
  }
  return v;
}

static void put_utf8(char **out, unsigned cp) {
  char *o = *out;
  if (cp < 0x80) *o++ = (char)cp;
  else if (cp < 0x800) *o++ = (char)(0xC0 | cp >> 6), *o++ = (char)(0x80 | (cp & 0x3F));
  else if (cp < 0x10000)
    *o++ = (char)(0xE0 | cp >> 12), *o++ = (char)(0x80 | ((cp >> 6) & 0x3F)),
    *o++ = (char)(0x80 | (cp & 0x3F));
  else
    *o++ = (char)(0xF0 | cp >> 18), *o++ = (char)(0x80 | ((cp >> 12) & 0x3F)),
    *o++ = (char)(0x80 | ((cp >> 6) & 0x3F)), *o++ = (char)(0x80 | (cp & 0x3F));
  *out = o;
}

/* At the opening quote. The decoded string is never longer than its source. */
static char *parse_string(Parser *ps) {
  ps->p++;
  const char *start = ps->p;
  while (*ps->p && *ps->p != '"') {
    if (*ps->p == '\\' && ps->p[1]) ps->p++;
    ps->p++;
  }
  if (!*ps->p) perr(ps, "unterminated string");
  char *buf = xmalloc((size_t)(ps->p - start) + 1), *o = buf;
  ps->p = start;
  while (*ps->p != '"') {
    unsigned char c = (unsigned char)*ps->p;
    if (c < 0x20) perr(ps, "control character in a string");
    if (c != '\\') {
      *o++ = (char)c;
      ps->p++;
      continue;
    }
    ps->p++;
    char e = *ps->p++;
    switch (e) {
    case '"': *o++ = '"'; break;
    case '\\': *o++ = '\\'; break;
    case '/': *o++ = '/'; break;
    case 'b': *o++ = '\b'; break;
    case 'f': *o++ = '\f'; break;
    case 'n': *o++ = '\n'; break;
    case 'r': *o++ = '\r'; break;
    case 't': *o++ = '\t'; break;
    case 'u': {
      unsigned cp = (unsigned)hex4(ps);
      if (cp == 0) perr(ps, "\\u0000 in a string is not supported");
      if (cp >= 0xD800 && cp < 0xDC00) {
        if (ps->p[0] != '\\' || ps->p[1] != 'u') perr(ps, "unpaired surrogate in \\u escape");
        ps->p += 2;
        unsigned lo = (unsigned)hex4(ps);
        if (lo < 0xDC00 || lo >= 0xE000) perr(ps, "bad low surrogate in \\u escape");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      } else if (cp >= 0xDC00 && cp < 0xE000) perr(ps, "unpaired surrogate in \\u escape");
      put_utf8(&o, cp);
      break;
    }
    default: ps->p--; perr(ps, "bad escape in a string");
    }
  }
  ps->p++;
  *o = 0;
  return buf;
}

static void parse_number(Parser *ps, Json *v) {
  const char *q = ps->p;
  if (*q == '-') q++;
  if (*q == '0') q++;
  else if (*q >= '1' && *q <= '9') while (*q >= '0' && *q <= '9') q++;
  else perr(ps, "unexpected character (a value was expected)");
  if (*q == '.') {
    q++;
    if (!(*q >= '0' && *q <= '9')) perr(ps, "bad number (digits expected after '.')");
    while (*q >= '0' && *q <= '9') q++;
  }
  if (*q == 'e' || *q == 'E') {
    q++;
    if (*q == '+' || *q == '-') q++;
    if (!(*q >= '0' && *q <= '9')) perr(ps, "bad number (digits expected in the exponent)");
    while (*q >= '0' && *q <= '9') q++;
  }
  errno = 0;
  v->type = JS_NUM;
  v->num = strtod(ps->p, NULL);
  if (errno == ERANGE && (v->num > 1 || v->num < -1)) perr(ps, "number out of range");
  ps->p = q;
}

static bool lit(Parser *ps, const char *word) {
  size_t n = strlen(word);
  if (strncmp(ps->p, word, n)) return false;
  ps->p += n;
  return true;
}

/* Items grow by doubling; keys stay aligned with items. */
static Json *add_item(Json *v, int *cap, bool keyed) {
  if (v->n == *cap) {
    int c = *cap ? *cap * 2 : 8;
    v->items = xrealloc(v->items, sizeof *v->items * (size_t)c);
    if (keyed) v->keys = xrealloc(v->keys, sizeof *v->keys * (size_t)c);
    *cap = c;
  }
  return &v->items[v->n++];
}

static void parse_container(Parser *ps, Json *v, bool obj) {
  if (++ps->depth > JSON_MAX_DEPTH) perr(ps, "nested too deeply");
  v->type = obj ? JS_OBJ : JS_ARR;
  ps->p++;
  skip_ws(ps);
  int cap = 0;
  char close = obj ? '}' : ']';
  if (*ps->p == close) {
    ps->p++;
    ps->depth--;
    return;
  }
  for (;;) {
    skip_ws(ps);
    char *key = NULL;
    if (obj) {
      if (*ps->p != '"') perr(ps, "expected a string key in an object");
      key = parse_string(ps);
      skip_ws(ps);
      if (*ps->p != ':') perr(ps, "expected ':' after an object key");
      ps->p++;
    }
    Json *item = add_item(v, &cap, obj);
    if (obj) v->keys[v->n - 1] = key;
    parse_value(ps, item);
    skip_ws(ps);
    if (*ps->p == ',') {
      ps->p++;
      continue;
    }
    if (*ps->p == close) {
      ps->p++;
      break;
    }
    perr(ps, obj ? "expected ',' or '}' in an object" : "expected ',' or ']' in an array");
  }
  ps->depth--;
}

static void parse_value(Parser *ps, Json *v) {
  *v = (Json){.type = JS_NULL};
  skip_ws(ps);
  switch (*ps->p) {
  case '{': parse_container(ps, v, true); return;
  case '[': parse_container(ps, v, false); return;
  case '"': v->type = JS_STR; v->str = parse_string(ps); return;
  case 0: perr(ps, "unexpected end of file (a value was expected)");
  default: break;
  }
  if (lit(ps, "true")) v->type = JS_BOOL, v->b = true;
  else if (lit(ps, "false")) v->type = JS_BOOL, v->b = false;
  else if (lit(ps, "null")) v->type = JS_NULL;
  else parse_number(ps, v);
}

Json *json_parse(const char *text, const char *what) {
  Parser ps = {.s = text, .p = text, .what = what};
  Json *v = xcalloc(1, sizeof *v);
  parse_value(&ps, v);
  skip_ws(&ps);
  if (*ps.p) perr(&ps, "trailing characters after the JSON value");
  return v;
}

Json *json_parse_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) fatal(EXIT_BADINPUT, "cannot open '%s': %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  char *buf = xmalloc(cap);
  for (;;) {
    if (n + 1 >= cap) buf = xrealloc(buf, cap *= 2);
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) break;
  }
  bool bad = ferror(f);
  fclose(f);
  if (bad) fatal(EXIT_BADINPUT, "error reading '%s'", path);
  if (memchr(buf, 0, n)) fatal(EXIT_BADINPUT, "%s: not a JSON file (it contains NUL bytes)", path);
  buf[n] = 0;
  Json *v = json_parse(buf, path);
  free(buf);
  return v;
}

const Json *json_get(const Json *obj, const char *key) {
  if (!obj || obj->type != JS_OBJ) return NULL;
  for (int i = 0; i < obj->n; i++)
    if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
  return NULL;
}

const char *json_type_name(JsonType t) {
  static const char *names[] = {"null", "a boolean", "a number", "a string", "an array",
                                "an object"};
  return names[t];
}
