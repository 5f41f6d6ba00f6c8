/* hoststate.py's two loops over every host event, in C (the numpy code is the reference and the fallback).

   measure(...): how much of each device's idle gaps each segment covers, summed
   per (event name, state), as hoststate._GapMeasure.overlaps and a bincount do.

   innermost(start, end, own, generic, overhead, input, work): a thread's innermost
   segments (hoststate.innermost_segments) in one stack sweep over one piece of
   a thread's events sorted by (start, -end), all of positive length (int64
   buffers), with each event's own state code (int64; ``generic`` where the name
   gives none); work[code + 1] (a bytes table) is 1 for the codes that inherit
   their parent's. Returns bytearrays (segment start, segment end, code,
   innermost event), all int64, and each state's union of its segments as a
   list of (code, starts, ends), codes ascending.

   innermost_named(start, end, names, own_by_name, to_global, generic, overhead, input, work): the
   same sweep where each event's own code is own_by_name[names[i]] (names int32, own_by_name int64),
   returning (segment start, segment end: int64; code: int8; to_global[names[innermost]]: int32;
   unions): what hoststate._walk_threads keeps, without the per-event gathers and casts numpy
   needed for them (about 0.13 s of 6.8 M events at 270 MB).

   free_cuts(start, end, size): hoststate._line_pieces' cut points, in one pass (int64 bytearray). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define STATES 16  /* state codes 0 .. STATES - 1 (hoststate.HOST_STATES has 7) */

typedef struct {
    int64_t *seg_s, *seg_e, *seg_c, *seg_i;  /* NULL: only count */
    Py_ssize_t count;
    int64_t last_time, last_inner;  /* the previous transition: a segment runs from it to the next */
    /* Each state's union: its segments merged where one ends as the next begins. */
    int64_t *union_s[STATES], *union_e[STATES];  /* NULL: only count */
    Py_ssize_t unions[STATES];
    int64_t union_end[STATES];  /* where the state's last merged interval ends (-1 before any) */
    int bad_code;
} segments;

/* A transition at ``time`` after which event ``inner`` (-1: none) is innermost. */
static inline void transition(segments *s, const int64_t *code, int64_t time, int64_t inner) {
    if (time > s->last_time && s->last_inner >= 0) {
        int64_t c = code[s->last_inner];
        if (s->seg_s) {
            s->seg_s[s->count] = s->last_time;
            s->seg_e[s->count] = time;
            s->seg_c[s->count] = c;
            s->seg_i[s->count] = s->last_inner;
        }
        s->count++;
        if (c < 0 || c >= STATES) {
            s->bad_code = 1;
        } else if (s->unions[c] && s->union_end[c] == s->last_time) {  /* touches the last one: extend it */
            if (s->union_e[c]) s->union_e[c][s->unions[c] - 1] = time;
            s->union_end[c] = time;
        } else {
            if (s->union_s[c]) {
                s->union_s[c][s->unions[c]] = s->last_time;
                s->union_e[c][s->unions[c]] = time;
            }
            s->unions[c]++;
            s->union_end[c] = time;
        }
    }
    s->last_time = time;
    s->last_inner = inner;
}

/* The sweep: events open on a stack; an event's end is clipped to its parent's; at equal times ends
   come first (deepest first), then starts (shallowest first), so the last transition at a time holds. */
static void sweep(Py_ssize_t n, const int64_t *start, const int64_t *end, const int64_t *own, int64_t generic,
                  int64_t overhead, int64_t input, const unsigned char *work, Py_ssize_t n_work, int64_t *stack,
                  int64_t *clipped, int64_t *code, segments *s) {
    Py_ssize_t depth = 0;
    s->count = 0;
    s->last_time = INT64_MIN;
    s->last_inner = -1;
    s->bad_code = 0;
    for (int c = 0; c < STATES; c++) {
        s->unions[c] = 0;
        s->union_end[c] = -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        while (depth && clipped[stack[depth - 1]] <= start[i]) {
            depth--;
            transition(s, code, clipped[stack[depth]], depth ? stack[depth - 1] : -1);
        }
        int64_t c = own[i];
        if (depth == 0) {
            clipped[i] = end[i];
            if (c == generic) c = overhead;
        } else {
            int64_t parent = stack[depth - 1], slot = c + 1;
            clipped[i] = end[i] < clipped[parent] ? end[i] : clipped[parent];
            /* Own category, else the nearest categorised ancestor's; input is kept downwards. */
            if (slot >= 0 && slot < n_work && work[slot]) {
                int64_t inherited = code[parent];
                if (c == generic || inherited == input) c = inherited;
            }
        }
        code[i] = c;
        stack[depth++] = i;
        transition(s, code, start[i], i);
    }
    while (depth) {
        depth--;
        transition(s, code, clipped[stack[depth]], depth ? stack[depth - 1] : -1);
    }
}

/* Per thread, as the sweeps run without the GIL (a second thread sweeping pieces ahead was tried: no
   gain measurable on 2 busy cores, and 933 MB peak memory at 270 MB against 695 MB). */
static _Thread_local int64_t *arena_cells;
static _Thread_local size_t arena_size;

static int64_t *scratch(size_t cells) {
    if (cells > arena_size) {
        int64_t *grown = PyMem_RawRealloc(arena_cells, cells * sizeof(int64_t));
        if (!grown) { PyErr_NoMemory(); return NULL; }
        arena_cells = grown;
        arena_size = cells;
    }
    return arena_cells;
}

/* Scratch beyond a usual piece's (hoststate._CHUNK events: 4 columns, innermost_named's) is not kept
   after the call. */
#define KEPT_CELLS ((size_t)4 << 21)

static void scratch_trim(void) {
    if (arena_size > KEPT_CELLS) {
        PyMem_RawFree(arena_cells);
        arena_cells = NULL;
        arena_size = 0;
    }
}

/* Each state's union from the segments a sweep wrote (the merge rule of transition()). */
static void fill_unions(segments *s, const int64_t *seg_s, const int64_t *seg_e, const int64_t *seg_c) {
    Py_ssize_t count[STATES] = {0};
    for (Py_ssize_t i = 0; i < s->count; i++) {
        int64_t c = seg_c[i];
        if (count[c] && s->union_e[c][count[c] - 1] == seg_s[i]) {
            s->union_e[c][count[c] - 1] = seg_e[i];
        } else {
            s->union_s[c][count[c]] = seg_s[i];
            s->union_e[c][count[c]] = seg_e[i];
            count[c]++;
        }
    }
}

/* The sweep of n events into four int64 bytearrays (segment start, end, code, innermost event),
   shrunk to the segments found, and each state's union as a list of (code, starts, ends). ``stack``:
   scratch of 3 * n + 3 cells. Returns a new (columns[0..3], unions) in *out or -1 with an error. */
static int sweep_columns(Py_ssize_t n, const int64_t *start, const int64_t *end, const int64_t *own,
                         long long generic, long long overhead, long long input, Py_buffer *work,
                         int64_t *stack, PyObject *columns[4], PyObject **unions_out) {
    int64_t *clipped = stack + n + 1, *code = clipped + n + 1;
    segments s;
    memset(&s, 0, sizeof(s));
    PyObject *unions = NULL;
    /* One sweep: room for every segment (2 transitions an event, at most one segment each), the
       columns shrunk to the segments found after; the unions are counted as it goes, filled after. */
    for (int k = 0; k < 4; k++) {
        columns[k] = PyByteArray_FromStringAndSize(NULL, (2 * n + 1) * (Py_ssize_t)sizeof(int64_t));
        if (!columns[k]) goto fail;
    }
    s.seg_s = (int64_t *)PyByteArray_AS_STRING(columns[0]);
    s.seg_e = (int64_t *)PyByteArray_AS_STRING(columns[1]);
    s.seg_c = (int64_t *)PyByteArray_AS_STRING(columns[2]);
    s.seg_i = (int64_t *)PyByteArray_AS_STRING(columns[3]);
    Py_BEGIN_ALLOW_THREADS
    sweep(n, start, end, own, generic, overhead, input, work->buf, work->len, stack, clipped, code, &s);
    Py_END_ALLOW_THREADS
    if (s.bad_code) {
        PyErr_SetString(PyExc_ValueError, "innermost: a state code outside 0..15");
        goto fail;
    }
    for (int k = 0; k < 4; k++)
        if (PyByteArray_Resize(columns[k], s.count * (Py_ssize_t)sizeof(int64_t))) goto fail;
    /* (code, starts, ends) of each state present, ascending */
    unions = PyList_New(0);
    if (!unions) goto fail;
    for (int c = 0; c < STATES; c++) {
        if (!s.unions[c]) continue;
        PyObject *a = PyByteArray_FromStringAndSize(NULL, s.unions[c] * 8);
        PyObject *b = PyByteArray_FromStringAndSize(NULL, s.unions[c] * 8);
        PyObject *entry = a && b ? Py_BuildValue("iOO", c, a, b) : NULL;
        if (entry) {
            s.union_s[c] = (int64_t *)PyByteArray_AS_STRING(a);
            s.union_e[c] = (int64_t *)PyByteArray_AS_STRING(b);
        }
        Py_XDECREF(a);
        Py_XDECREF(b);
        if (!entry || PyList_Append(unions, entry)) { Py_XDECREF(entry); goto fail; }
        Py_DECREF(entry);
    }
    fill_unions(&s, (int64_t *)PyByteArray_AS_STRING(columns[0]), (int64_t *)PyByteArray_AS_STRING(columns[1]),
                (int64_t *)PyByteArray_AS_STRING(columns[2]));
    *unions_out = unions;
    return 0;
fail:
    for (int k = 0; k < 4; k++) Py_CLEAR(columns[k]);
    Py_XDECREF(unions);
    return -1;
}

/* The end of a sweep's call: its columns and unions let go (a result holds its own references),
   scratch beyond a usual piece's freed, the arguments' buffers released. */
static void end_sweep_call(PyObject *columns[4], PyObject *unions, Py_buffer **buffers, int n) {
    for (int k = 0; k < 4; k++) Py_XDECREF(columns[k]);
    Py_XDECREF(unions);
    scratch_trim();
    for (int k = 0; k < n; k++) PyBuffer_Release(buffers[k]);
}

static PyObject *innermost(PyObject *self, PyObject *args) {
    Py_buffer b_start, b_end, b_own, b_work;
    long long generic, overhead, input;
    if (!PyArg_ParseTuple(args, "y*y*y*LLLy*", &b_start, &b_end, &b_own, &generic, &overhead, &input, &b_work))
        return NULL;
    PyObject *result = NULL, *columns[4] = {NULL, NULL, NULL, NULL}, *unions = NULL;
    Py_ssize_t n = b_start.len / (Py_ssize_t)sizeof(int64_t);
    if (b_end.len != b_start.len || b_own.len != b_start.len) {
        PyErr_SetString(PyExc_ValueError, "start, end and own differ in length");
        goto done;
    }
    /* Scratch kept between calls: a thread's pieces come one after another, and fresh pages
       each time cost more than the sweep. */
    int64_t *stack = scratch((size_t)(3 * n + 3));
    if (!stack) goto done;
    if (sweep_columns(n, b_start.buf, b_end.buf, b_own.buf, generic, overhead, input, &b_work, stack, columns,
                      &unions))
        goto done;
    result = PyTuple_Pack(5, columns[0], columns[1], columns[2], columns[3], unions);
done:
    end_sweep_call(columns, unions, (Py_buffer *[]){&b_start, &b_end, &b_own, &b_work}, 4);
    return result;
}

static PyObject *innermost_named(PyObject *self, PyObject *args) {
    Py_buffer b_start, b_end, b_names, b_own, b_global, b_work;
    long long generic, overhead, input;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*LLLy*", &b_start, &b_end, &b_names, &b_own, &b_global, &generic,
                          &overhead, &input, &b_work))
        return NULL;
    PyObject *result = NULL, *columns[4] = {NULL, NULL, NULL, NULL}, *unions = NULL;
    Py_ssize_t n = b_start.len / (Py_ssize_t)sizeof(int64_t), n_names = b_own.len / (Py_ssize_t)sizeof(int64_t);
    const int32_t *names = b_names.buf, *global = b_global.buf;
    const int64_t *own_by_name = b_own.buf;
    if (b_end.len != b_start.len || b_names.len != n * (Py_ssize_t)sizeof(int32_t)) {
        PyErr_SetString(PyExc_ValueError, "start, end and names differ in length");
        goto done;
    }
    if (b_global.len != n_names * (Py_ssize_t)sizeof(int32_t)) {
        PyErr_SetString(PyExc_ValueError, "own_by_name and to_global differ in length");
        goto done;
    }
    int64_t *stack = scratch((size_t)(4 * n + 3));
    if (!stack) goto done;
    int64_t *own = stack + 3 * n + 3;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (names[i] < 0 || names[i] >= n_names) {
            PyErr_SetString(PyExc_ValueError, "innermost_named: a name id outside the tables");
            goto done;
        }
        own[i] = own_by_name[names[i]];
    }
    if (sweep_columns(n, b_start.buf, b_end.buf, own, generic, overhead, input, &b_work, stack, columns,
                      &unions))
        goto done;
    /* In place, front to back (each cell is read before a narrower write can reach it): codes to
       int8, innermost events to their global name ids (int32). */
    Py_ssize_t count = PyByteArray_GET_SIZE(columns[2]) / (Py_ssize_t)sizeof(int64_t);
    const int64_t *code64 = (int64_t *)PyByteArray_AS_STRING(columns[2]);
    int8_t *code8 = (int8_t *)PyByteArray_AS_STRING(columns[2]);
    const int64_t *inner = (int64_t *)PyByteArray_AS_STRING(columns[3]);
    int32_t *named = (int32_t *)PyByteArray_AS_STRING(columns[3]);
    for (Py_ssize_t k = 0; k < count; k++) {
        int64_t c = code64[k], i = inner[k];
        code8[k] = (int8_t)c;
        named[k] = global[names[i]];
    }
    if (PyByteArray_Resize(columns[2], count) || PyByteArray_Resize(columns[3], count * (Py_ssize_t)sizeof(int32_t)))
        goto done;
    result = PyTuple_Pack(5, columns[0], columns[1], columns[2], columns[3], unions);
done:
    end_sweep_call(columns, unions, (Py_buffer *[]){&b_start, &b_end, &b_names, &b_own, &b_global, &b_work}, 6);
    return result;
}

/* hoststate._line_pieces' cuts of a thread's events as stored (sorted by start): 0, then, for each
   multiple T of ``size`` in turn, the first event that lasts (end > start), is not the first such,
   starts where no earlier lasting event is still open, and whose index among the lasting events is
   at least max(T, the previous cut's + 1); then n. None where the events are not sorted by start or
   at most ``size`` of them (or of those that last) are there: the thread is one piece. */
static PyObject *free_cuts(PyObject *self, PyObject *args) {
    Py_buffer b_start, b_end;
    long long size;
    if (!PyArg_ParseTuple(args, "y*y*L", &b_start, &b_end, &size)) return NULL;
    PyObject *result = NULL;
    const int64_t *start = b_start.buf, *end = b_end.buf;
    Py_ssize_t n = b_start.len / (Py_ssize_t)sizeof(int64_t);
    if (b_end.len != b_start.len || size < 1) {
        PyErr_SetString(PyExc_ValueError, "free_cuts: start and end differ in length, or size < 1");
        goto done;
    }
    if (n <= size) { result = Py_NewRef(Py_None); goto done; }
    /* At most one cut per size lasting events after the first, and the ends. */
    PyObject *cuts = PyByteArray_FromStringAndSize(NULL, (n / size + 3) * (Py_ssize_t)sizeof(int64_t));
    if (!cuts) goto done;
    int64_t *cut = (int64_t *)PyByteArray_AS_STRING(cuts);
    Py_ssize_t count = 0, kept = 0;
    int sorted = 1;
    Py_BEGIN_ALLOW_THREADS
    int64_t reach = INT64_MIN, target = size, last_cut = 0;
    cut[count++] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i && start[i] < start[i - 1]) { sorted = 0; break; }
        if (end[i] <= start[i]) continue;
        /* kept: this event's index among the lasting ones */
        if (kept > 0 && reach <= start[i] && kept >= target && kept >= last_cut + 1) {
            cut[count++] = i;
            last_cut = kept;
            target += size;  /* the next multiple; a cut past it is caught up one free start at a time */
        }
        if (end[i] > reach) reach = end[i];
        kept++;
    }
    Py_END_ALLOW_THREADS
    if (!sorted || kept <= size) {
        Py_DECREF(cuts);
        result = Py_NewRef(Py_None);
        goto done;
    }
    cut[count++] = n;
    if (PyByteArray_Resize(cuts, count * (Py_ssize_t)sizeof(int64_t))) { Py_DECREF(cuts); goto done; }
    result = cuts;
done:
    PyBuffer_Release(&b_start);
    PyBuffer_Release(&b_end);
    return result;
}

/* k: how many of bounds[0..n) are <= t, searched from ``hint`` (segments come in time order). */
static inline Py_ssize_t upper(const int64_t *bounds, Py_ssize_t n, int64_t t, Py_ssize_t hint) {
    Py_ssize_t lo, hi, k = hint;
    if (k > 0 && bounds[k - 1] > t) {  /* t lies before the hint: gallop down */
        Py_ssize_t step = 1;
        hi = k - 1;
        while (hi - step >= 0 && bounds[hi - step] > t) step *= 2;
        lo = hi - step < 0 ? 0 : hi - step;
    } else {  /* gallop up */
        Py_ssize_t step = 1;
        lo = k;
        while (lo + step <= n && bounds[lo + step - 1] <= t) step *= 2;
        hi = lo + step > n ? n : lo + step;
    }
    while (lo < hi) {  /* the first index in [lo, hi) whose bound is > t */
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (bounds[mid] <= t) lo = mid + 1; else hi = mid;
    }
    return lo;
}

typedef struct {
    Py_buffer before, inside, total;
} gap_set;

/* measure(bounds, left, sets, seg_start, seg_end, seg_code, seg_name, shown_below, states)
   sets: a sequence of (before, inside, totals) per device; before and inside are int64 of
   len(bounds) + 1 (hoststate._GapMeasure), totals a writable int64 buffer of at least
   (max name + 1) * states cells, to which each segment whose code is below ``shown_below``
   adds its covered length at name * states + code. seg_code is int8, seg_name int32. */
static PyObject *measure(PyObject *self, PyObject *args) {
    Py_buffer b_bounds, b_left, b_s, b_e, b_c, b_n;
    PyObject *sets_obj;
    long long shown_below, states;
    if (!PyArg_ParseTuple(args, "y*y*Oy*y*y*y*LL", &b_bounds, &b_left, &sets_obj, &b_s, &b_e, &b_c, &b_n,
                          &shown_below, &states))
        return NULL;
    PyObject *result = NULL, *sets_seq = PySequence_Fast(sets_obj, "sets must be a sequence");
    Py_ssize_t n_sets = sets_seq ? PySequence_Fast_GET_SIZE(sets_seq) : 0, got = 0;
    gap_set *sets = sets_seq ? PyMem_Calloc((size_t)n_sets + 1, sizeof(gap_set)) : NULL;
    if (!sets) { if (sets_seq) PyErr_NoMemory(); goto done; }
    for (; got < n_sets; got++) {
        PyObject *item = PySequence_Fast_GET_ITEM(sets_seq, got);
        if (!PyArg_ParseTuple(item, "y*y*w*", &sets[got].before, &sets[got].inside, &sets[got].total)) goto done;
    }
    const int64_t *bounds = b_bounds.buf, *left = b_left.buf, *seg_s = b_s.buf, *seg_e = b_e.buf;
    const int8_t *seg_c = b_c.buf;
    const int32_t *seg_n = b_n.buf;
    Py_ssize_t nb = b_bounds.len / 8, n = b_s.len / 8;
    if (nb == 0) {  /* no gaps: nothing is covered */
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (b_e.len != b_s.len || b_c.len != n || b_n.len != 4 * n || b_left.len != 8 * (nb + 1)) {
        PyErr_SetString(PyExc_ValueError, "measure: columns of different lengths");
        goto done;
    }
    for (Py_ssize_t k = 0; k < n_sets; k++) {
        if (sets[k].before.len != 8 * (nb + 1) || sets[k].inside.len != 8 * (nb + 1)) {
            PyErr_SetString(PyExc_ValueError, "measure: before and inside need len(bounds) + 1 cells");
            goto done;
        }
    }
    Py_ssize_t k_start = 0, k_end = 0;
    int64_t searched_end = INT64_MIN;  /* the last end searched (k_end is its piece) */
    int short_totals = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !short_totals; i++) {
        if (seg_c[i] >= shown_below) continue;
        int64_t cell = (int64_t)seg_n[i] * states + seg_c[i];
        /* A thread's segments mostly follow one another: where one starts as the last ended, its
           start's piece is already known. */
        k_start = seg_s[i] == searched_end ? k_end : upper(bounds, nb, seg_s[i], k_start);
        k_end = upper(bounds, nb, seg_e[i], k_end);
        searched_end = seg_e[i];
        int64_t into_start = seg_s[i] - left[k_start], into_end = seg_e[i] - left[k_end];
        for (Py_ssize_t k = 0; k < n_sets; k++) {
            const int64_t *before = sets[k].before.buf, *inside = sets[k].inside.buf;
            int64_t overlap = (before[k_end] + into_end * inside[k_end]) - (before[k_start] + into_start * inside[k_start]);
            if (overlap && (cell < 0 || 8 * (cell + 1) > sets[k].total.len)) {
                short_totals = 1;
                break;
            }
            if (overlap) ((int64_t *)sets[k].total.buf)[cell] += overlap;
        }
    }
    Py_END_ALLOW_THREADS
    if (short_totals) {
        PyErr_SetString(PyExc_ValueError, "measure: totals too short for the names");
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    for (Py_ssize_t k = 0; k < got; k++) {
        PyBuffer_Release(&sets[k].before);
        PyBuffer_Release(&sets[k].inside);
        PyBuffer_Release(&sets[k].total);
    }
    PyMem_Free(sets);
    Py_XDECREF(sets_seq);
    PyBuffer_Release(&b_bounds);
    PyBuffer_Release(&b_left);
    PyBuffer_Release(&b_s);
    PyBuffer_Release(&b_e);
    PyBuffer_Release(&b_c);
    PyBuffer_Release(&b_n);
    return result;
}

static PyMethodDef methods[] = {
    {"innermost", innermost, METH_VARARGS, "A thread's innermost segments: see the module's source."},
    {"innermost_named", innermost_named, METH_VARARGS, "innermost by name ids: see the module's source."},
    {"free_cuts", free_cuts, METH_VARARGS, "A sorted thread's cut points: see the module's source."},
    {"measure", measure, METH_VARARGS, "Segments measured against gap sets: see the module's source."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hoststate", "hoststate.py's loops over host events, in C.",
                                    -1, methods};

PyMODINIT_FUNC PyInit__hoststate(void) { return PyModule_Create(&module); }
