/* import_tensor.c — ONNX TensorProto -> IR tensor with data.
 *
 * Decodes initializers, Constant values and tensor attributes: dims (rank <= 8,
 * each in [0, 2^40]), data from raw_data (little-endian), from the typed fields
 * (float_data, int32_data, int64_data, double_data, uint64_data, as the ONNX
 * format assigns them per dtype), or from an external file beside the model.
 * The element count is checked against dims before anything is allocated, so
 * a corrupted header cannot make us allocate more than the data it carries.
 * Not here: deciding what a tensor is (kinds, init) — that is import.c. */
#include "import.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* raw_data is little-endian; we copy it as it is. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "snc assumes a little-endian host");

const char *imp_esc(const char *s) {
  static char buf[8][160];
  static int k;
  char *o = buf[k++ & 7];
  size_t j = 0;
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (j > 120) {
      memcpy(o + j, "...", 4);
      return o;
    }
    if (*c < 0x20 || *c == 0x7f) j += (size_t)snprintf(o + j, 8, "\\x%02x", *c);
    else o[j++] = (char)*c;
  }
  o[j] = 0;
  return o;
}

/* Length of the UTF-8 sequence at c (1-4), or 0 if it is not one: overlong
 * forms, surrogates and code points past U+10FFFF are not UTF-8 either. */
static int utf8_len(const unsigned char *c) {
  if (c[0] < 0x80) return 1;
  int n = c[0] >= 0xc2 && c[0] <= 0xdf ? 2 : c[0] >= 0xe0 && c[0] <= 0xef ? 3
        : c[0] >= 0xf0 && c[0] <= 0xf4 ? 4 : 0;
  for (int i = 1; i < n; i++)
    if ((c[i] & 0xc0) != 0x80) return 0;
  if (n == 3 && ((c[0] == 0xe0 && c[1] < 0xa0) || (c[0] == 0xed && c[1] >= 0xa0))) return 0;
  if (n == 4 && ((c[0] == 0xf0 && c[1] < 0x90) || (c[0] == 0xf4 && c[1] >= 0x90))) return 0;
  return n;
}

/* Names reach plan.json, plan.txt and train.c: they must be text. */
void imp_check_name(const char *s, const char *what) {
  for (const unsigned char *c = (const unsigned char *)s; *c;) {
    if (*c < 0x20 || *c == 0x7f)
      fatal(EXIT_BADINPUT, "%s name '%s' contains control characters", what, imp_esc(s));
    int n = utf8_len(c);
    if (!n) {
      /* The message itself stays text: every non-ASCII byte as \xNN. */
      char buf[160];
      size_t j = 0;
      for (const unsigned char *d = (const unsigned char *)s; *d && j < 120; d++)
        j += *d < 0x80 ? (size_t)snprintf(buf + j, 2, "%c", *d) : (size_t)snprintf(buf + j, 5, "\\x%02x", *d);
      buf[j] = 0;
      fatal(EXIT_BADINPUT, "%s name '%s' is not valid UTF-8", what, buf);
    }
    c += n;
  }
}

void imp_tensor_dims(const SncOnnx__TensorProto *tp, const char *tname, int *rank,
                     int64_t *dims) {
  if (tp->n_dims > MAX_RANK)
    fatal(EXIT_BADINPUT, "tensor '%s' has rank %zu (at most %d supported)", imp_esc(tname),
          tp->n_dims, MAX_RANK);
  for (size_t i = 0; i < tp->n_dims; i++) {
    if (tp->dims[i] < 0 || tp->dims[i] > IMP_MAX_DIM)
      fatal(EXIT_BADINPUT, "tensor '%s' has dimension %lld (must be in [0, 2^40])",
            imp_esc(tname), (long long)tp->dims[i]);
    dims[i] = tp->dims[i];
  }
  *rank = (int)tp->n_dims;
}

/* One external_data entry's value as a non-negative integer. */
static int64_t ext_int(const char *v, const char *key, const char *tname) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (end == v || *end || errno || x < 0)
    fatal(EXIT_BADINPUT, "tensor '%s': external data %s '%s' is not a byte count",
          imp_esc(tname), key, imp_esc(v));
  return x;
}

/* Reads `bytes` bytes of external data into a new buffer. The location is
 * relative to the model's folder and may not leave it (as the ONNX checker
 * requires), so a model cannot make snc read arbitrary files. */
static void *read_external(const SncOnnx__TensorProto *tp, const char *tname, int64_t bytes,
                           const char *model_dir) {
  const char *loc = NULL;
  int64_t offset = 0, length = -1;
  for (size_t i = 0; i < tp->n_external_data; i++) {
    const char *k = imp_str(tp->external_data[i]->key), *v = imp_str(tp->external_data[i]->value);
    if (strcmp(k, "location") == 0) loc = v;
    else if (strcmp(k, "offset") == 0) offset = ext_int(v, k, tname);
    else if (strcmp(k, "length") == 0) length = ext_int(v, k, tname);
  }
  if (!loc || !*loc)
    fatal(EXIT_BADINPUT, "tensor '%s' has external data without a location", imp_esc(tname));
  if (loc[0] == '/' || strcmp(loc, "..") == 0 || strncmp(loc, "../", 3) == 0 ||
      strstr(loc, "/../") || (strlen(loc) >= 3 && strcmp(loc + strlen(loc) - 3, "/..") == 0))
    fatal(EXIT_BADINPUT, "tensor '%s': external data location '%s' must be a relative path "
          "inside the model's folder", imp_esc(tname), imp_esc(loc));
  if (length >= 0 && length != bytes)
    fatal(EXIT_BADINPUT, "tensor '%s': external data length %lld does not match its shape "
          "(%lld bytes)", imp_esc(tname), (long long)length, (long long)bytes);
  char *path = xasprintf("%s/%s", model_dir, loc);
  FILE *f = fopen(path, "rb");
  if (!f)
    fatal(EXIT_BADINPUT, "cannot open external data file '%s' of tensor '%s': %s",
          imp_esc(path), imp_esc(tname), strerror(errno));
  /* Check the size before allocating: the dims may be absurd. A folder opens
   * too, and its size means nothing. Each error closes f first, so that a
   * caller that survives errors (the fuzzer) does not run out of files. */
  struct stat st;
  int64_t size = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) ? (int64_t)st.st_size : -1;
  if (size < 0 || offset > size || bytes > size - offset) {
    fclose(f);
    fatal(EXIT_BADINPUT, "external data file '%s' is %s for tensor '%s' (needs %lld "
          "bytes at offset %lld, has %lld)", imp_esc(path),
          size < 0 ? "not a regular file" : "too short", imp_esc(tname), (long long)bytes,
          (long long)offset, (long long)(size < 0 ? 0 : size));
  }
  void *data = xmalloc((size_t)bytes);
  if (fseeko(f, offset, SEEK_SET) != 0 || (bytes && fread(data, 1, (size_t)bytes, f) != (size_t)bytes)) {
    fclose(f);
    fatal(EXIT_BADINPUT, "cannot read %lld bytes at offset %lld of '%s' (tensor '%s')",
          (long long)bytes, (long long)offset, imp_esc(path), imp_esc(tname));
  }
  fclose(f);
  free(path);
  return data;
}

/* Copies a typed field (n values of type `from`) into dtype elements. */
static void *typed_data(const SncOnnx__TensorProto *tp, const char *tname, int dtype,
                        int64_t numel) {
  size_t have;
  switch (dtype) {
  case DT_FLOAT: have = tp->n_float_data; break;
  case DT_INT64: have = tp->n_int64_data; break;
  case DT_DOUBLE: have = tp->n_double_data; break;
  case DT_UINT32: case DT_UINT64: have = tp->n_uint64_data; break;
  default: have = tp->n_int32_data; break;  // int32, and the narrow types packed in int32
  }
  if ((int64_t)have != numel)
    fatal(EXIT_BADINPUT, "tensor '%s' has %zu values for %lld elements", imp_esc(tname), have,
          (long long)numel);
  int es = dtype_size(dtype);
  unsigned char *d = xmalloc((size_t)(numel * es));
  for (int64_t i = 0; i < numel; i++) {
    switch (dtype) {
    case DT_FLOAT: ((float *)d)[i] = tp->float_data[i]; break;
    case DT_INT64: ((int64_t *)d)[i] = tp->int64_data[i]; break;
    case DT_DOUBLE: ((double *)d)[i] = tp->double_data[i]; break;
    case DT_UINT32: ((uint32_t *)d)[i] = (uint32_t)tp->uint64_data[i]; break;
    case DT_UINT64: ((uint64_t *)d)[i] = tp->uint64_data[i]; break;
    case DT_INT32: ((int32_t *)d)[i] = tp->int32_data[i]; break;
    default:  // 1- and 2-byte types: the low bytes of each int32 value
      if (es == 1) d[i] = (unsigned char)tp->int32_data[i];
      else ((uint16_t *)d)[i] = (uint16_t)tp->int32_data[i];
      break;
    }
  }
  return d;
}

int imp_tensor_from_proto(Graph *g, const SncOnnx__TensorProto *tp, const char *name,
                          TensorKind kind, const char *model_dir) {
  int dtype = tp->has_data_type ? tp->data_type : DT_UNDEF;
  if (dtype_size(dtype) == 0)
    fatal(EXIT_BADINPUT, "tensor '%s' has unsupported data type %s (%d)", imp_esc(name),
          dtype_name(dtype), dtype);
  if (tp->segment)
    fatal(EXIT_BADINPUT, "tensor '%s' is segmented, which snc does not support", imp_esc(name));
  int rank;
  int64_t dims[MAX_RANK];
  imp_tensor_dims(tp, name, &rank, dims);
  char *what = xasprintf("tensor '%s'", imp_esc(name));  // for mul_checked's message
  int64_t numel = 1;
  for (int i = 0; i < rank; i++) numel = mul_checked(numel, dims[i], what);
  int64_t bytes = mul_checked(numel, dtype_size(dtype), what);
  free(what);

  void *data;
  if (tp->has_data_location && tp->data_location == SNC_ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
    data = read_external(tp, name, bytes, model_dir);
  } else if (tp->has_data_location && tp->data_location != SNC_ONNX__TENSOR_PROTO__DATA_LOCATION__DEFAULT) {
    fatal(EXIT_BADINPUT, "tensor '%s' has unknown data location %d", imp_esc(name),
          (int)tp->data_location);
  } else if (tp->has_raw_data) {
    if ((int64_t)tp->raw_data.len != bytes)
      fatal(EXIT_BADINPUT, "tensor '%s' has %zu bytes of data; %lld %s elements need %lld",
            imp_esc(name), tp->raw_data.len, (long long)numel, dtype_name(dtype),
            (long long)bytes);
    data = xmalloc((size_t)bytes);
    if (bytes) memcpy(data, tp->raw_data.data, (size_t)bytes);
  } else {
    data = typed_data(tp, name, dtype, numel);
  }

  if (graph_find_tensor(g, name) >= 0)
    fatal(EXIT_BADINPUT, "tensor '%s' is defined twice", imp_esc(name));
  int t = graph_add_tensor(g, name, dtype, kind);
  tensor_set_shape(&g->t[t], rank, dims);
  g->t[t].data = data;  // never NULL (xmalloc(0) gives a byte), so "has data" is data != NULL
  g->t[t].ndata = numel;
  g->t[t].has_init = true;
  return t;
}
