/* json.h — a small JSON reader (json.c) for the files snc reads back: two
 * plan.json files for `snc plan --diff`. A DOM of Json values; errors are
 * one line naming the file, line and column, exit 2 (bad input). */
#ifndef JSON_H
#define JSON_H

#include <stdbool.h>

typedef enum { JS_NULL, JS_BOOL, JS_NUM, JS_STR, JS_ARR, JS_OBJ } JsonType;

typedef struct Json {
  JsonType type;
  bool b;                  // JS_BOOL
  double num;              // JS_NUM (exact for integers up to 2^53: byte counts fit)
  char *str;               // JS_STR (UTF-8, NUL-terminated; embedded NULs rejected)
  int n;                   // JS_ARR / JS_OBJ: number of items
  struct Json *items;      // JS_ARR / JS_OBJ: the values
  char **keys;             // JS_OBJ: the keys, aligned with items
} Json;

/* Parses the whole file; fatal(EXIT_BADINPUT, ...) on any error. */
Json *json_parse_file(const char *path);
/* Parses a NUL-terminated buffer; `what` names it in errors. */
Json *json_parse(const char *text, const char *what);
/* The member `key` of an object (NULL if absent or not an object). */
const Json *json_get(const Json *obj, const char *key);
const char *json_type_name(JsonType t);

#endif
