/* The XPlane event decoder in C: one pass over a line's events.

   read.py's numpy decoder does the same in many vectorised passes and stays
   the reference (SCALDIAG_NATIVE=0 selects it; tests compare the two on every
   fixture and on fuzzed bytes). Semantics follow it exactly: protobuf's
   "the last value of a field wins", a length-delimited field where a varint
   is expected counts as 0, and wire types 3, 4, 6, 7 are errors.

   decode_events(buffer, pos, end, wanted, max_events) walks the XLine fields
   in buffer[pos:end) from pos and stops after max_events events (or at end).
   Returns (next_pos, columns, rest, stats):
     columns: bytearray of int64 triples per event (metadata_id, offset_ps, duration_ps);
     rest:    bytes of every field that is not an event (the line's header);
     stats:   bytearray of int64 sextuples, one per value field of each stat
              whose metadata_id is in ``wanted`` (a bytes of int64 ids):
              (event row, stat metadata_id, field number, raw value bits,
               body start, body end).
   Only the one-byte tag 0x22 (XLine.events, length-delimited) is an event,
   as in wire.bulk_batches. No numpy headers: results go out as bytearrays. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define EVENTS_TAG 0x22
#define EVENT_METADATA_ID 1
#define EVENT_OFFSET_PS 2
#define EVENT_DURATION_PS 3
#define EVENT_STATS 4
#define STAT_METADATA_ID 1
#define STAT_FIRST_VALUE 2 /* double_value .. ref_value: 2 .. 7 */
#define STAT_LAST_VALUE 7

typedef struct {
    int64_t *data;
    Py_ssize_t len, cap;
} vec;

static int vec_push(vec *v, const int64_t *items, Py_ssize_t n) {
    if (v->len + n > v->cap) {
        Py_ssize_t cap = v->cap ? v->cap : 1024;
        while (cap < v->len + n) cap *= 2;
        int64_t *grown = PyMem_Realloc(v->data, (size_t)cap * sizeof(int64_t));
        if (!grown) { PyErr_NoMemory(); return -1; }
        v->data = grown;
        v->cap = cap;
    }
    memcpy(v->data + v->len, items, (size_t)n * sizeof(int64_t));
    v->len += n;
    return 0;
}

static PyObject *vec_bytearray(vec *v) {
    return PyByteArray_FromStringAndSize((const char *)v->data, v->len * (Py_ssize_t)sizeof(int64_t));
}

/* A varint at *p (before end); 0 on success, -1 past the end or longer than 10 bytes. */
static inline int varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    const uint8_t *q = *p;
    uint64_t value = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (q >= end) return -1;
        uint8_t byte = *q++;
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) { *p = q; *out = value; return 0; }
    }
    return -1;
}

typedef struct {
    uint64_t number, wire, value;      /* value: varint or fixed bits; 0 for length-delimited */
    const uint8_t *body, *body_end;    /* the payload of a length-delimited field, else empty at its end */
} field;

/* The field at *p inside [*p, end); 0, or -1 for bad bytes (sets no exception). */
static inline int next_field(const uint8_t **p, const uint8_t *end, field *f) {
    uint64_t tag;
    if (varint(p, end, &tag)) return -1;
    f->number = tag >> 3;
    f->wire = tag & 7;
    f->value = 0;
    const uint8_t *q = *p;
    switch (f->wire) {
    case 0:
        if (varint(&q, end, &f->value)) return -1;
        f->body = f->body_end = q;
        break;
    case 1:
        if (end - q < 8) return -1;
        memcpy(&f->value, q, 8);  /* little-endian hosts (x86_64, aarch64) */
        q += 8;
        f->body = f->body_end = q;
        break;
    case 5: {
        uint32_t v32;
        if (end - q < 4) return -1;
        memcpy(&v32, q, 4);
        f->value = v32;
        q += 4;
        f->body = f->body_end = q;
        break;
    }
    case 2: {
        uint64_t length;
        if (varint(&q, end, &length)) return -1;
        if (length > (uint64_t)(end - q)) return -1;
        f->body = q;
        q += length;
        f->body_end = q;
        break;
    }
    default:
        return -1;
    }
    *p = q;
    return 0;
}

static inline int is_wanted(int64_t id, const int64_t *wanted, Py_ssize_t n_wanted) {
    for (Py_ssize_t i = 0; i < n_wanted; i++)
        if (wanted[i] == id) return 1;
    return 0;
}

/* One XStat: its value fields appended to stats when its metadata_id (the last one) is wanted. */
static int decode_stat(const uint8_t *base, const uint8_t *p, const uint8_t *end, int64_t row,
                       const int64_t *wanted, Py_ssize_t n_wanted, vec *stats) {
    int64_t meta = 0;
    const uint8_t *q = p;
    field f;
    while (q < end) {
        if (next_field(&q, end, &f)) return -1;
        if (f.number == STAT_METADATA_ID) meta = (int64_t)f.value;
    }
    if (!is_wanted(meta, wanted, n_wanted)) return 0;
    q = p;
    while (q < end) {
        next_field(&q, end, &f);  /* checked above */
        if (f.number >= STAT_FIRST_VALUE && f.number <= STAT_LAST_VALUE) {
            int64_t record[6] = {row, meta, (int64_t)f.number, (int64_t)f.value,
                                 (int64_t)(f.body - base), (int64_t)(f.body_end - base)};
            if (vec_push(stats, record, 6)) return -2;
        }
    }
    return 0;
}

/* One XEvent in [p, end): its three columns, and its wanted stats. */
static int decode_event(const uint8_t *base, const uint8_t *p, const uint8_t *end, int64_t row,
                        const int64_t *wanted, Py_ssize_t n_wanted, int64_t out[3], vec *stats) {
    out[0] = out[1] = out[2] = 0;
    field f;
    while (p < end) {
        if (next_field(&p, end, &f)) return -1;
        if (f.number >= EVENT_METADATA_ID && f.number <= EVENT_DURATION_PS) {
            out[f.number - 1] = (int64_t)f.value;
        } else if (f.number == EVENT_STATS && n_wanted) {
            int err = decode_stat(base, f.body, f.body_end, row, wanted, n_wanted, stats);
            if (err) return err;
        }
    }
    return 0;
}

static PyObject *decode_events(PyObject *self, PyObject *args) {
    Py_buffer data, wanted_buf;
    Py_ssize_t pos, end, max_events;
    if (!PyArg_ParseTuple(args, "y*nny*n", &data, &pos, &end, &wanted_buf, &max_events)) return NULL;
    PyObject *result = NULL;
    vec columns = {0}, stats = {0};
    char *rest = NULL;
    Py_ssize_t rest_len = 0, rest_cap = 0;
    const char *error = NULL;
    if (pos < 0 || end > data.len || pos > end) {
        error = "a field runs past the end of its message (truncated?)";
        goto done;
    }
    const uint8_t *base = data.buf, *p = base + pos, *stop = base + end;
    const int64_t *wanted = wanted_buf.buf;
    Py_ssize_t n_wanted = wanted_buf.len / (Py_ssize_t)sizeof(int64_t);
    int64_t row = 0;
    while (p < stop && row < max_events) {
        if (*p == EVENTS_TAG) {
            const uint8_t *q = p + 1;
            uint64_t length;
            if (varint(&q, stop, &length) || length > (uint64_t)(stop - q)) {
                error = "a field runs past the end of its message (truncated?)";
                goto done;
            }
            int64_t out[3];
            int err = decode_event(base, q, q + length, row, wanted, n_wanted, out, &stats);
            if (err == -2) goto done;  /* out of memory: exception set */
            if (err) {
                error = "field runs past its message (or an unsupported wire type)";
                goto done;
            }
            if (vec_push(&columns, out, 3)) goto done;
            row++;
            p = q + length;
            continue;
        }
        const uint8_t *field_start = p;
        field f;
        uint64_t tag;
        const uint8_t *t = p;
        if (varint(&t, stop, &tag) || (tag >> 3) == 0 || !((tag & 7) == 0 || (tag & 7) == 1 || (tag & 7) == 2 ||
                                                           (tag & 7) == 5)) {
            PyErr_Format(PyExc_ValueError, "no protobuf field at byte %zd (field number %llu, wire type %llu)",
                         (Py_ssize_t)(field_start - base), (unsigned long long)(tag >> 3),
                         (unsigned long long)(tag & 7));
            goto done;
        }
        if (next_field(&p, stop, &f)) {
            error = "a field runs past the end of its message (truncated?)";
            goto done;
        }
        Py_ssize_t n = p - field_start;
        if (rest_len + n > rest_cap) {
            rest_cap = (rest_len + n) * 2 + 64;
            char *grown = PyMem_Realloc(rest, (size_t)rest_cap);
            if (!grown) { PyErr_NoMemory(); goto done; }
            rest = grown;
        }
        memcpy(rest + rest_len, field_start, (size_t)n);
        rest_len += n;
    }
    PyObject *cols = vec_bytearray(&columns), *st = vec_bytearray(&stats);
    PyObject *rest_bytes = PyBytes_FromStringAndSize(rest ? rest : "", rest_len);
    if (cols && st && rest_bytes)
        result = Py_BuildValue("nOOO", (Py_ssize_t)(p - base), cols, rest_bytes, st);
    Py_XDECREF(cols);
    Py_XDECREF(st);
    Py_XDECREF(rest_bytes);
done:
    if (error) PyErr_SetString(PyExc_ValueError, error);
    PyMem_Free(columns.data);
    PyMem_Free(stats.data);
    PyMem_Free(rest);
    PyBuffer_Release(&data);
    PyBuffer_Release(&wanted_buf);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_events", decode_events, METH_VARARGS, "Decode a line's events: see the module's source."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wire", "The XPlane event decoder in C.", -1, methods};

PyMODINIT_FUNC PyInit__wire(void) { return PyModule_Create(&module); }
