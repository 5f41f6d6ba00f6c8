/* The XPlane event decoder in C: one pass over a line's events.

   read.py's numpy decoder does the same in many vectorised passes and stays
   the reference (SCALDIAG_NATIVE=0 selects it; tests compare the two on every
   fixture and on fuzzed bytes). Semantics follow it exactly: protobuf's
   "the last value of a field wins", a length-delimited field where a varint
   is expected counts as 0, and wire types 3, 4, 6, 7 are errors.

   decode_events(buffer, pos, end, wanted, max_events, start_ns, end_ns, metadata_id, row)
   walks the XLine fields in buffer[pos:end) from pos and stops after max_events
   events (or at end). Event k's columns go to row + k of the writable int64
   buffers start_ns (offset_ps // 1000), end_ns (start plus the duration rounded
   to ns, negative durations as 0) and metadata_id: the line's timestamp is added
   by the caller, as read.py's _batch does. Returns (next_pos, events, rest, stats):
     rest:  bytes of every field that is not an event (the line's header);
     stats: bytearray of int64 sextuples, one per value field of each stat
            whose metadata_id is in ``wanted`` (a bytes of int64 ids):
            (row of its event, stat metadata_id, field number, raw value bits,
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
        /* Raw, and no exception set here: decode_events calls it without the GIL */
        int64_t *grown = PyMem_RawRealloc(v->data, (size_t)cap * sizeof(int64_t));
        if (!grown) return -1;
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

/* Stat ids below this are looked up in a table (a plane's stat ids are small: they number its stat names). */
#define WANTED_TABLE 4096

typedef struct {
    const int64_t *ids;
    Py_ssize_t n;
    unsigned char table[WANTED_TABLE];  /* table[id] for ids below WANTED_TABLE */
} wanted_set;

static void wanted_init(wanted_set *w, const int64_t *ids, Py_ssize_t n) {
    w->ids = ids;
    w->n = n;
    memset(w->table, 0, sizeof(w->table));
    for (Py_ssize_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < WANTED_TABLE) w->table[ids[i]] = 1;
}

static inline int wanted_has(const wanted_set *w, int64_t id) {
    if (id >= 0 && id < WANTED_TABLE) return w->table[id];
    return is_wanted(id, w->ids, w->n);
}


/* One XStat: its value fields appended to stats when its metadata_id (the last one) is wanted. */
static int decode_stat(const uint8_t *base, const uint8_t *p, const uint8_t *end, int64_t row,
                       const wanted_set *wanted, vec *stats) {
    int64_t meta = 0;
    const uint8_t *q = p;
    field f;
    while (q < end) {
        if (next_field(&q, end, &f)) return -1;
        if (f.number == STAT_METADATA_ID) meta = (int64_t)f.value;
    }
    if (!wanted_has(wanted, meta)) return 0;
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
                        const wanted_set *wanted, int64_t out[3], vec *stats) {
    out[0] = out[1] = out[2] = 0;
    field f;
    while (p < end) {
        if (next_field(&p, end, &f)) return -1;
        if (f.number >= EVENT_METADATA_ID && f.number <= EVENT_DURATION_PS) {
            out[f.number - 1] = (int64_t)f.value;
        } else if (f.number == EVENT_STATS && wanted->n) {
            int err = decode_stat(base, f.body, f.body_end, row, wanted, stats);
            if (err) return err;
        }
    }
    return 0;
}

/* a // 1000 rounded down, as numpy's // does. */
static inline int64_t ns_floor(int64_t ps) {
    int64_t q = ps / 1000;
    return (ps % 1000 < 0) ? q - 1 : q;
}

static PyObject *decode_events(PyObject *self, PyObject *args) {
    Py_buffer data, wanted_buf, out_start, out_end, out_meta;
    Py_ssize_t pos, end, max_events, first_row;
    if (!PyArg_ParseTuple(args, "y*nny*nw*w*w*n", &data, &pos, &end, &wanted_buf, &max_events, &out_start, &out_end,
                          &out_meta, &first_row))
        return NULL;
    PyObject *result = NULL;
    vec stats = {0};
    char *rest = NULL;
    Py_ssize_t rest_len = 0, rest_cap = 0;
    const char *error = NULL;
    int64_t *col_start = out_start.buf, *col_end = out_end.buf, *col_meta = out_meta.buf;
    Py_ssize_t room = out_start.len / 8;
    if (out_end.len / 8 < room) room = out_end.len / 8;
    if (out_meta.len / 8 < room) room = out_meta.len / 8;
    if (first_row < 0 || first_row > room) {
        PyErr_SetString(PyExc_ValueError, "decode_events: row outside the output columns");
        goto done;
    }
    if (max_events > room - first_row) max_events = room - first_row;
    if (pos < 0 || end > data.len || pos > end) {
        error = "a field runs past the end of its message (truncated?)";
        goto done;
    }
    const uint8_t *base = data.buf, *p = base + pos, *stop = base + end;
    const int64_t *wanted = wanted_buf.buf;
    wanted_set wanted_ids;
    wanted_init(&wanted_ids, wanted, wanted_buf.len / (Py_ssize_t)sizeof(int64_t));
    int64_t row = first_row, last_row = first_row + max_events;
    /* The loop touches no Python object: it runs without the GIL, so that read.py's threads decode
       a line's batches at once. What went wrong is said once the GIL is back. */
    enum { DONE, NO_MEMORY, TRUNCATED, BAD_EVENT, NO_FIELD } status = DONE;
    const uint8_t *bad_field = NULL;
    uint64_t bad_tag = 0;
    PyThreadState *unlocked = PyEval_SaveThread();
    while (p < stop && row < last_row) {
        if (*p == EVENTS_TAG) {
            const uint8_t *q = p + 1;
            uint64_t length;
            if (varint(&q, stop, &length) || length > (uint64_t)(stop - q)) {
                status = TRUNCATED;
                break;
            }
            int64_t out[3];
            int err = decode_event(base, q, q + length, row, &wanted_ids, out, &stats);
            if (err == -2) { status = NO_MEMORY; break; }
            if (err) { status = BAD_EVENT; break; }
            /* (max(duration, 0) + 500) // 1000 as numpy computes it: int64 sums wrap (done unsigned,
               where C's signed overflow is undefined), // rounds down */
            int64_t first_ns = ns_floor(out[1]), duration = out[2] > 0 ? out[2] : 0;
            int64_t rounded = ns_floor((int64_t)((uint64_t)duration + 500));
            col_meta[row] = out[0];
            col_start[row] = first_ns;
            col_end[row] = (int64_t)((uint64_t)first_ns + (uint64_t)rounded);
            row++;
            p = q + length;
            continue;
        }
        const uint8_t *field_start = p;
        field f;
        uint64_t tag = 0;
        const uint8_t *t = p;
        if (varint(&t, stop, &tag) || (tag >> 3) == 0 || !((tag & 7) == 0 || (tag & 7) == 1 || (tag & 7) == 2 ||
                                                           (tag & 7) == 5)) {
            status = NO_FIELD;
            bad_field = field_start;
            bad_tag = tag;
            break;
        }
        if (next_field(&p, stop, &f)) { status = TRUNCATED; break; }
        Py_ssize_t n = p - field_start;
        if (rest_len + n > rest_cap) {
            rest_cap = (rest_len + n) * 2 + 64;
            char *grown = PyMem_RawRealloc(rest, (size_t)rest_cap);
            if (!grown) { status = NO_MEMORY; break; }
            rest = grown;
        }
        memcpy(rest + rest_len, field_start, (size_t)n);
        rest_len += n;
    }
    PyEval_RestoreThread(unlocked);
    switch (status) {
    case DONE: break;
    case NO_MEMORY: PyErr_NoMemory(); goto done;
    case TRUNCATED: error = "a field runs past the end of its message (truncated?)"; goto done;
    case BAD_EVENT: error = "field runs past its message (or an unsupported wire type)"; goto done;
    case NO_FIELD:
        PyErr_Format(PyExc_ValueError, "no protobuf field at byte %zd (field number %llu, wire type %llu)",
                     (Py_ssize_t)(bad_field - base), (unsigned long long)(bad_tag >> 3),
                     (unsigned long long)(bad_tag & 7));
        goto done;
    }
    PyObject *st = vec_bytearray(&stats);
    PyObject *rest_bytes = PyBytes_FromStringAndSize(rest ? rest : "", rest_len);
    if (st && rest_bytes)
        result = Py_BuildValue("nnOO", (Py_ssize_t)(p - base), (Py_ssize_t)(row - first_row), rest_bytes, st);
    Py_XDECREF(st);
    Py_XDECREF(rest_bytes);
done:
    if (error) PyErr_SetString(PyExc_ValueError, error);
    PyMem_RawFree(stats.data);
    PyBuffer_Release(&out_start);
    PyBuffer_Release(&out_end);
    PyBuffer_Release(&out_meta);
    PyMem_RawFree(rest);
    PyBuffer_Release(&data);
    PyBuffer_Release(&wanted_buf);
    return result;
}

/* event_batches(buffer, pos, end, every) -> (bounds, events) or None: the offsets in [pos, end]
   (a line's fields) where decode_events, started at pos, stops after every `every` events (each
   batch's end: the next one's start), pos first and end last, as a bytearray of int64, and the
   line's event count. Fields are only stepped over (a tag and a length each), without the GIL:
   read.py then decodes the batches at once, each into its own rows of columns of the exact size.
   None where any field does not step cleanly: the caller decodes the line in one pass, which says
   what is wrong. */
static PyObject *event_batches(PyObject *self, PyObject *args) {
    Py_buffer data;
    Py_ssize_t pos, end, every;
    if (!PyArg_ParseTuple(args, "y*nnn", &data, &pos, &end, &every)) return NULL;
    if (pos < 0 || end > data.len || pos > end || every < 1) {
        PyBuffer_Release(&data);
        Py_RETURN_NONE;
    }
    vec bounds = {0};
    int64_t events = 0, at = pos;
    int bad = vec_push(&bounds, &at, 1) ? 2 : 0;
    const uint8_t *base = data.buf, *p = base + pos, *stop = base + end;
    PyThreadState *unlocked = PyEval_SaveThread();
    while (!bad && p < stop) {
        uint64_t tag;
        const uint8_t *q = p;
        field f;
        if (*p == EVENTS_TAG) {
            uint64_t length;
            q = p + 1;
            if (varint(&q, stop, &length) || length > (uint64_t)(stop - q)) { bad = 1; break; }
            p = q + length;
            if (++events % every == 0 && p < stop) {
                at = (int64_t)(p - base);
                if (vec_push(&bounds, &at, 1)) bad = 2;
            }
            continue;
        }
        if (varint(&q, stop, &tag) || (tag >> 3) == 0 || next_field(&p, stop, &f)) bad = 1;
    }
    PyEval_RestoreThread(unlocked);
    PyObject *result = NULL;
    at = end;
    if (bad == 2 || (!bad && vec_push(&bounds, &at, 1))) {
        PyErr_NoMemory();
    } else if (bad) {
        result = Py_NewRef(Py_None);
    } else {
        PyObject *b = vec_bytearray(&bounds);
        if (b) {
            result = Py_BuildValue("OL", b, (long long)events);
            Py_DECREF(b);
        }
    }
    PyMem_RawFree(bounds.data);
    PyBuffer_Release(&data);
    return result;
}

/* distinct_texts(buffer, starts, ends): for texts buffer[starts[i]:ends[i]] (int64 buffers),
   (inverse, firsts): bytearrays of int64, firsts[k] the first text of the k-th distinct
   value, inverse[i] the k of text i. A trace repeats its op names and copy details every
   step: the caller makes one str per distinct text. */
static inline uint64_t fnv1a(const uint8_t *p, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static PyObject *distinct_texts(PyObject *self, PyObject *args) {
    Py_buffer data, b_starts, b_ends;
    if (!PyArg_ParseTuple(args, "y*y*y*", &data, &b_starts, &b_ends)) return NULL;
    PyObject *result = NULL, *inverse = NULL;
    vec firsts = {0};
    int64_t *table = NULL;  /* -1: empty, else a k */
    uint64_t *hashes = NULL;
    Py_ssize_t n = b_starts.len / 8, cap = 64, used = 0;
    const int64_t *starts = b_starts.buf, *ends = b_ends.buf;
    const uint8_t *base = data.buf;
    if (b_ends.len != b_starts.len) { PyErr_SetString(PyExc_ValueError, "starts and ends differ in length"); goto done; }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (starts[i] < 0 || ends[i] < starts[i] || ends[i] > data.len) {
            PyErr_SetString(PyExc_ValueError, "a text outside the buffer");
            goto done;
        }
    }
    inverse = PyByteArray_FromStringAndSize(NULL, n * 8);
    table = PyMem_Malloc((size_t)cap * sizeof(int64_t));
    hashes = PyMem_Malloc((size_t)cap * sizeof(uint64_t));
    if (!inverse || !table || !hashes) { if (!PyErr_Occurred()) PyErr_NoMemory(); goto done; }
    for (Py_ssize_t j = 0; j < cap; j++) table[j] = -1;
    int64_t *inv = (int64_t *)PyByteArray_AS_STRING(inverse);
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *text = base + starts[i];
        Py_ssize_t len = (Py_ssize_t)(ends[i] - starts[i]);
        uint64_t h = fnv1a(text, len);
        Py_ssize_t slot = (Py_ssize_t)(h & (uint64_t)(cap - 1));
        for (;;) {
            int64_t k = table[slot];
            if (k < 0) {  /* a new text */
                int64_t first = i;
                if (vec_push(&firsts, &first, 1)) { PyErr_NoMemory(); goto done; }
                k = firsts.len - 1;
                table[slot] = k;
                hashes[slot] = h;
                inv[i] = k;
                used++;
                break;
            }
            int64_t f = firsts.data[k];
            if (hashes[slot] == h && ends[f] - starts[f] == len && !memcmp(base + starts[f], text, (size_t)len)) {
                inv[i] = k;
                break;
            }
            slot = (slot + 1) & (cap - 1);
        }
        if (2 * used > cap) {  /* grow: rehash the distinct texts */
            Py_ssize_t grown_cap = 2 * cap;
            int64_t *t2 = PyMem_Malloc((size_t)grown_cap * sizeof(int64_t));
            uint64_t *h2 = PyMem_Malloc((size_t)grown_cap * sizeof(uint64_t));
            if (!t2 || !h2) { PyMem_Free(t2); PyMem_Free(h2); PyErr_NoMemory(); goto done; }
            for (Py_ssize_t j = 0; j < grown_cap; j++) t2[j] = -1;
            for (Py_ssize_t j = 0; j < cap; j++) {
                if (table[j] < 0) continue;
                Py_ssize_t to = (Py_ssize_t)(hashes[j] & (uint64_t)(grown_cap - 1));
                while (t2[to] >= 0) to = (to + 1) & (grown_cap - 1);
                t2[to] = table[j];
                h2[to] = hashes[j];
            }
            PyMem_Free(table);
            PyMem_Free(hashes);
            table = t2, hashes = h2, cap = grown_cap;
        }
    }
    PyObject *first_bytes = vec_bytearray(&firsts);
    if (first_bytes) {
        result = PyTuple_Pack(2, inverse, first_bytes);
        Py_DECREF(first_bytes);
    }
done:
    Py_XDECREF(inverse);
    PyMem_RawFree(firsts.data);
    PyMem_Free(table);
    PyMem_Free(hashes);
    PyBuffer_Release(&data);
    PyBuffer_Release(&b_starts);
    PyBuffer_Release(&b_ends);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_events", decode_events, METH_VARARGS, "Decode a line's events: see the module's source."},
    {"distinct_texts", distinct_texts, METH_VARARGS, "Number a batch of texts by distinct value: see the source."},
    {"event_batches", event_batches, METH_VARARGS, "A line's batches of events: see the source."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wire", "The XPlane event decoder in C.", -1, methods};

PyMODINIT_FUNC PyInit__wire(void) { return PyModule_Create(&module); }
