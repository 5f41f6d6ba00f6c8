/* A streaming scanner of Kineto (Chrome trace) JSON: the events the analysis reads
   go straight into columns, nothing else is kept.

   kineto/reference.py (json.loads of the whole document, then one dict per event) is
   the reference: this scanner either gives its result exactly or gives up
   (ScanError), and the caller then reads the file with kineto/reference.py, which says
   what is wrong with it in its own words. It gives up on anything outside the
   strict JSON of RFC 8259 (Python's json also takes NaN and Infinity), on invalid
   UTF-8, on nesting deeper than MAX_DEPTH, on integers of MAX_INT_DIGITS digits
   or more (Python's int refuses them), on a top-level key written with escapes,
   and on a second traceEvents.

   One event of traceEvents is a unit: Scanner.feed(buffer, final) scans whole
   units and returns the bytes consumed; the caller keeps the rest and appends
   the next piece of the file, so memory is one piece plus the columns.

   An event is "fast" when it is a complete event (ph "X") whose fields the
   analysis reads are plain: name and cat strings, ts and dur plain numbers of at
   most 15 integer and 9 decimal digits, pid and tid integers of at most 18
   digits (or such digits as text, or names with a letter: "Traces", "stream 7"), args.device,
   args.stream, args.bytes such integers. Its columns are kept: seq (its index in
   traceEvents), ts_ns and dur_ns (exact: decimals are parsed as decimals, rounded
   half to even past nanoseconds, as Decimal does), name and cat (ids in one table
   of the raw string bytes), pid, tid, device, stream, bytes and flags saying which
   were present and which of pid/tid are string ids. Any other event that may
   matter (ph B, E, M, any odd field, a key written with escapes) is "slow": its
   bytes are kept as they are, with its seq, and kineto/fast.py reads it with
   json.loads. Events of other phases (flows, instants, counters) are checked and
   dropped. The top-level values other than traceEvents that the reader uses are
   kept as bytes (meta). No numpy headers: the columns go out as bytes, without a copy. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__linux__)
#include <sys/random.h>
#endif

#define MAX_DEPTH 200          /* Python's json raises RecursionError near 1,000 levels, less on a deep stack */
#define MAX_INT_DIGITS 4300    /* int("9" * 4301) raises: the reference refuses such a document */
#define TS_INT_DIGITS 15
#define TS_FRAC_DIGITS 9
#define ID_DIGITS 18

static const int64_t POW10[] = {1, 10, 100, 1000, 10000, 100000, 1000000};  /* up to TS_FRAC_DIGITS - 3 */

enum { OK = 0, MORE = 1, BAD = 2, SLOW = 3 };
enum { F_DEVICE = 1, F_STREAM = 2, F_BYTES = 4, F_PID_STR = 8, F_TID_STR = 16, F_CAT = 32 };
enum { ST_START, ST_TOP, ST_EVENTS, ST_DONE };

typedef struct { char *data; size_t len, cap; } buf_t;

static int buf_put(buf_t *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        char *grown = PyMem_RawRealloc(b->data, cap);  /* Raw: called without the GIL (feed) */
        if (!grown) return -1;  /* feed raises MemoryError once it holds the GIL again */
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

static void buf_free(buf_t *b) { PyMem_RawFree(b->data); b->data = NULL; b->len = b->cap = 0; }

/* The string table: raw bytes (between the quotes, escapes as written) to ids 0, 1, ... */
typedef struct {
    uint32_t *slots;  /* id + 1, 0 when empty */
    size_t nslots;
    buf_t arena, offsets, hashes;  /* offsets: uint64 start per id (and one past the last) */
    uint32_t count;
    int overflow;   /* ran out of ids: feed raises OverflowError (no Python error is set without the GIL) */
    uint64_t seed;  /* secret per scanner: names cannot be built to share a slot (issue 34, item 11) */
} intern_t;

/* A secret seed per scanner. Without one, 200,000 8-byte names built to share a slot of this table took
   36 s to read (20 MB; linear probing turned quadratic) against 2.6 s for random names. */
static uint64_t random_seed(const void *salt) {
    uint64_t seed = 0;
#if defined(__linux__)
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) == (ssize_t)sizeof seed) return seed;
#endif
    seed = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ULL ^ (uint64_t)(uintptr_t)salt ^ (uint64_t)clock();
    return seed;
}

/* Eight bytes at a time (names of kernels run to hundreds of bytes, one lookup per event), from the
   seed, then murmur3's finalizer so that every bit of the seed reaches the slot's bits. */
static uint64_t hash_bytes(const char *p, size_t n, uint64_t seed) {
    uint64_t h = 1469598103934665603ULL ^ n ^ seed, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    h ^= seed;
    h ^= h >> 33; h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
}

static int intern_grow(intern_t *t) {
    size_t n = t->nslots ? t->nslots * 2 : 1024;
    uint32_t *slots = PyMem_RawCalloc(n, sizeof(uint32_t));
    if (!slots) return -1;
    uint64_t *hashes = (uint64_t *)t->hashes.data;
    for (uint32_t id = 0; id < t->count; id++) {
        size_t i = hashes[id] & (n - 1);
        while (slots[i]) i = (i + 1) & (n - 1);
        slots[i] = id + 1;
    }
    PyMem_RawFree(t->slots);
    t->slots = slots;
    t->nslots = n;
    return 0;
}

static int64_t intern(intern_t *t, const char *p, size_t n) {
    if ((size_t)t->count * 2 >= t->nslots && intern_grow(t) < 0) return -1;
    if (t->count == 0 && t->offsets.len == 0) {
        uint64_t zero = 0;
        if (buf_put(&t->offsets, &zero, 8) < 0) return -1;
    }
    uint64_t h = hash_bytes(p, n, t->seed);
    uint64_t *hashes = (uint64_t *)t->hashes.data, *offs = (uint64_t *)t->offsets.data;
    size_t i = h & (t->nslots - 1);
    while (t->slots[i]) {
        uint32_t id = t->slots[i] - 1;
        if (hashes[id] == h && offs[id + 1] - offs[id] == n && memcmp(t->arena.data + offs[id], p, n) == 0) return id;
        i = (i + 1) & (t->nslots - 1);
    }
    if (t->count == UINT32_MAX - 1) { t->overflow = 1; return -1; }
    if (buf_put(&t->arena, p, n) < 0 || buf_put(&t->hashes, &h, 8) < 0) return -1;
    uint64_t end = t->arena.len;
    if (buf_put(&t->offsets, &end, 8) < 0) return -1;
    t->slots[i] = t->count + 1;
    return t->count++;
}

static void intern_free(intern_t *t) {
    PyMem_RawFree(t->slots); t->slots = NULL; t->nslots = 0;
    buf_free(&t->arena); buf_free(&t->offsets); buf_free(&t->hashes);
    t->count = 0;
}

#define NCOLS 11
static const char *COL_NAMES[NCOLS] = {"seq", "ts_ns", "dur_ns", "name", "cat", "pid", "tid",
                                       "device", "stream", "bytes", "flags"};

/* A column: a bytes object grown in place (_PyBytes_Resize), handed out as it is, never copied. */
typedef struct { PyObject *bytes; size_t len, cap; } col_t;

typedef struct {
    PyObject_HEAD
    int state, need_comma, top_is_array, seen_events;
    int64_t seq;
    col_t cols[NCOLS];
    intern_t strings;
    PyObject *slow;  /* list of (seq, bytes) */
    PyObject *meta;  /* dict: top-level key -> bytes of its value */
    PyThreadState *unlocked;  /* while feed runs without the GIL: the thread state to take it back with */
    int feeding;  /* a feed is running: a second one on this scanner (another thread) is refused */
} Scanner;

/* feed scans without the GIL, so that a second thread can scan another part of the file at the same
   time (kineto/stream.py). The rare steps that make Python objects (a column grows, a slow event, a
   top-level value) take the GIL back around them. */
static inline void gil_take(Scanner *sc) { if (sc->unlocked) PyEval_RestoreThread(sc->unlocked); }
static inline void gil_drop(Scanner *sc) { if (sc->unlocked) sc->unlocked = PyEval_SaveThread(); }

/* Room for n more bytes: the bytes object doubled (rarely called: kept out of col_put's inlined path). */
static int col_grow(Scanner *sc, col_t *c, size_t n) {
    size_t cap = c->cap ? c->cap * 2 : 1 << 16;
    while (cap < c->len + n) cap *= 2;
    gil_take(sc);
    if (!c->bytes) c->bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)cap);
    else if (_PyBytes_Resize(&c->bytes, (Py_ssize_t)cap) < 0) c->bytes = NULL;
    gil_drop(sc);
    if (!c->bytes) { c->len = c->cap = 0; return -1; }
    c->cap = cap;
    return 0;
}

static inline int col_put(Scanner *sc, col_t *c, const void *p, size_t n) {
    if (c->len + n > c->cap && col_grow(sc, c, n) < 0) return -1;
    memcpy(PyBytes_AS_STRING(c->bytes) + c->len, p, n);
    c->len += n;
    return 0;
}

static PyObject *ScanError;

/* ---- the JSON grammar over [p, end): each returns OK (p moved past), MORE (ran off the end), BAD ---- */

static unsigned char WS[256], STR_PLAIN[256];

static void init_tables(void) {
    WS[' '] = WS['\t'] = WS['\n'] = WS['\r'] = 1;
    for (int c = 0x20; c < 0x80; c++) STR_PLAIN[c] = 1;
    STR_PLAIN['"'] = STR_PLAIN['\\'] = 0;
}

/* Between tokens a writer puts nothing or one space: both are tested before the loop. */
static inline const char *skip_ws(const char *p, const char *end) {
    if (p < end && (unsigned char)*p > ' ') return p;
    if (p < end && *p == ' ' && p + 1 < end && (unsigned char)p[1] > ' ') return p + 1;
    while (p < end && WS[(unsigned char)*p]) p++;
    return p;
}

/* One UTF-8 sequence at p (p[0] >= 0x80) as Python's strict decoder takes it. */
static int utf8_seq(const unsigned char **pp, const unsigned char *end) {
    const unsigned char *p = *pp;
    unsigned char c = p[0], lo = 0x80, hi = 0xBF;
    int n;
    if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c >= 0xE0 && c <= 0xEF) { n = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return BAD;
    if (end - p <= n) return MORE;
    if (p[1] < lo || p[1] > hi) return BAD;
    for (int k = 2; k <= n; k++) if (p[k] < 0x80 || p[k] > 0xBF) return BAD;
    *pp = p + n + 1;
    return OK;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* The index of the lowest byte whose high bit is set in a nonzero mask of high bits (a little-endian
   load: the lowest byte is the first in memory; elsewhere 0, and the byte loop after it finds it). */
static inline int first_byte(uint64_t highs) {
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return __builtin_ctzll(highs) >> 3;
#else
    (void)highs;
    return 0;
#endif
}

static int hexdig(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* The first byte at or after p that is not plain in a string ('"', '\\', below 0x20, above 0x7F),
   or e. Each block's first stop is exact, so a hit returns at once: no byte loop after it. */
static inline const unsigned char *plain_run(const unsigned char *p, const unsigned char *e) {
#if defined(__SSE2__)
    /* Sixteen bytes at a time where SSE2 is (every x86-64): one signed compare below 0x20 finds the
       control bytes and the bytes above 0x7F (negative as signed bytes) at once. */
    while (e - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                                                 _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                                    _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
        int mask = _mm_movemask_epi8(stop);
        if (mask) return p + __builtin_ctz((unsigned)mask);
        p += 16;
    }
#endif
    /* Eight plain bytes at a time: none is '"', '\\', below 0x20 or above 0x7F (a word that may hold
       one is looked at exactly: the first test can say yes for a plain word, never no for another). */
    while (e - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint64_t quote = w ^ (ONES * '"'), slash = w ^ (ONES * '\\');
        uint64_t hit = ((w - ONES * 0x20) | (quote - ONES) | (slash - ONES) | w) & HIGHS;
        if (hit) {
            /* Exact for the lowest byte: each test (x - ONES*k) & ~x marks the first byte below k
               at its own place (a borrow only marks bytes above it), and w's own high bits are
               the bytes above 0x7F. So the first marked byte is the first one not plain. */
            hit = (((w - ONES * 0x20) & ~w) | ((quote - ONES) & ~quote) | ((slash - ONES) & ~slash) | w)
                  & HIGHS;
            p += first_byte(hit);
            break;  /* first_byte is 0 off little-endian GCC: the byte loop finds the stop */
        }
        p += 8;
    }
    while (p < e && STR_PLAIN[*p]) p++;
    return p;
}

/* A string at *pp (on its opening quote): [*s, *s + *n) its raw bytes, *esc whether it has escapes. */
static int scan_string_any(const char **pp, const char *end, const char **s, size_t *n, int *esc) {
    const unsigned char *p = (const unsigned char *)*pp + 1, *e = (const unsigned char *)end;
    *esc = 0;
    for (;;) {
        p = plain_run(p, e);
        if (p >= e) return MORE;
        if (*p == '"') break;
        if (*p == '\\') {
            *esc = 1;
            if (e - p < 2) return MORE;
            unsigned char c = p[1];
            if (c == 'u') {
                if (e - p < 6) return MORE;
                if (!(hexdig(p[2]) && hexdig(p[3]) && hexdig(p[4]) && hexdig(p[5]))) return BAD;
                p += 6;
            } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
                p += 2;
            } else {
                return BAD;
            }
        } else if (*p < 0x20) {
            return BAD;  /* a control character: json.loads(strict=True) refuses it */
        } else {
            int r = utf8_seq(&p, e);
            if (r != OK) return r;
        }
    }
    *s = *pp + 1;
    *n = (size_t)((const char *)p - *s);
    *pp = (const char *)p + 1;
    return OK;
}

/* scan_string_any, inlined for the usual string: plain and ending within 32 bytes (every key of an
   event and most values; a call per string was a fifth of the scanner's time). */
static inline int scan_string(const char **pp, const char *end, const char **s, size_t *n, int *esc) {
#if defined(__SSE2__)
    const char *p = *pp + 1;
    for (int block = 0; block < 2 && end - p >= 16; block++, p += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                                                 _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                                    _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
        int mask = _mm_movemask_epi8(stop);
        if (!mask) continue;
        const char *q = p + __builtin_ctz((unsigned)mask);
        if (*q != '"') break;  /* an escape, a control byte, UTF-8: the whole check */
        *s = *pp + 1;
        *n = (size_t)(q - *s);
        *esc = 0;
        *pp = q + 1;
        return OK;
    }
#endif
    return scan_string_any(pp, end, s, n, esc);
}

/* A number's text at *pp: int_digits, frac digits, has exponent, and the digits' values read on the
   way (int_value, frac_value: one pass over the digits; they wrap past 19 digits, where no caller
   reads them). */
typedef struct {
    const char *int_start, *frac_start;
    int neg, int_digits, frac_digits, has_exp;
    uint64_t int_value, frac_value;
} num_t;

#if defined(__SSE2__) && defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define SWAR_DIGITS 1
static const uint64_t POW10_U64[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

/* The value of n digits (1 <= n <= 8) at p, 8 bytes readable there: the digits' values are shifted
   to the top of the word (zeros in front), then summed in pairs, fours and eights (three multiplies;
   simdjson's parse_eight_digits_unrolled). */
static inline uint64_t digits_value(const char *p, int n) {
    uint64_t w;
    memcpy(&w, p, 8);
    w = (w - 0x3030303030303030ULL) << (8 * (8 - n));
    w = w * 10 + (w >> 8);
    return (((w & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32))) +
            (((w >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32)))) >> 32;
}
#endif

/* The digits at *pp, their count and their value (modulo 2**64). */
static inline const char *digit_run(const char *p, const char *end, uint64_t *value) {
#ifdef SWAR_DIGITS
    /* A run shorter than 16 with 16 bytes readable (every ts, dur and id): found with one compare,
       read without a loop (the loop's exit, at a length that changes from number to number, was
       mispredicted). */
    if (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i other = _mm_or_si128(_mm_cmplt_epi8(v, _mm_set1_epi8('0')), _mm_cmpgt_epi8(v, _mm_set1_epi8('9')));
        int mask = _mm_movemask_epi8(other);
        if (mask) {
            int n = __builtin_ctz((unsigned)mask);
            if (n == 0) *value = 0;
            else if (n <= 8) *value = digits_value(p, n);
            else *value = digits_value(p, 8) * POW10_U64[n - 8] + digits_value(p + 8, n - 8);
            return p + n;
        }
    }
#endif
    uint64_t v = 0;
    unsigned d;
    while (p < end && (d = (unsigned)(unsigned char)*p - '0') <= 9) {
        v = v * 10 + d;
        p++;
    }
    *value = v;
    return p;
}

static int scan_number(const char **pp, const char *end, num_t *num) {
    const char *p = *pp;
    num->neg = num->has_exp = num->frac_digits = 0;
    num->frac_start = NULL;
    num->frac_value = 0;
    if (p < end && *p == '-') { num->neg = 1; p++; }
    if (p >= end) return MORE;
    num->int_start = p;
    if (*p == '0') { p++; num->int_value = 0; }
    else if (*p >= '1' && *p <= '9') p = digit_run(p, end, &num->int_value);
    else return BAD;
    num->int_digits = (int)(p - num->int_start);
    if (p < end && *p == '.') {
        p++;
        num->frac_start = p;
        p = digit_run(p, end, &num->frac_value);
        num->frac_digits = (int)(p - num->frac_start);
        if (p < end && num->frac_digits == 0) return BAD;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        num->has_exp = 1;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        const char *digits = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p < end && p == digits) return BAD;
    }
    if (p >= end) return MORE;  /* the number may go on in the next piece */
    if (!num->frac_start && !num->has_exp && p - num->int_start >= MAX_INT_DIGITS) return BAD;
    *pp = p;
    return OK;
}

static int literal(const char **pp, const char *end, const char *word, size_t n) {
    if ((size_t)(end - *pp) < n) return memcmp(*pp, word, (size_t)(end - *pp)) == 0 ? MORE : BAD;
    if (memcmp(*pp, word, n) != 0) return BAD;
    *pp += n;
    return OK;
}

/* Any value, checked and passed over (containers without recursion). */
static int skip_value(const char **pp, const char *end) {
    char stack[MAX_DEPTH];
    int depth = 0, r;
    const char *p = *pp, *s;
    size_t n;
    int esc;
    num_t num;
    for (;;) {
        /* a value */
        p = skip_ws(p, end);
        if (p >= end) return MORE;
        switch (*p) {
        case '{':
        case '[':
            if (depth == MAX_DEPTH) return BAD;
            stack[depth++] = *p;
            p = skip_ws(p + 1, end);
            if (p >= end) return MORE;
            if (*p == (stack[depth - 1] == '{' ? '}' : ']')) { p++; depth--; goto after_value; }
            if (stack[depth - 1] == '{') goto object_key;
            continue;
        case '"': r = scan_string(&p, end, &s, &n, &esc); break;
        case 't': r = literal(&p, end, "true", 4); break;
        case 'f': r = literal(&p, end, "false", 5); break;
        case 'n': r = literal(&p, end, "null", 4); break;
        default: r = scan_number(&p, end, &num); break;
        }
        if (r != OK) return r;
    after_value:
        if (depth == 0) { *pp = p; return OK; }
        p = skip_ws(p, end);
        if (p >= end) return MORE;
        if (*p == ',') {
            p++;
            if (stack[depth - 1] == '[') continue;
            goto object_key;
        }
        if (*p == (stack[depth - 1] == '{' ? '}' : ']')) { p++; depth--; goto after_value; }
        return BAD;
    object_key:
        p = skip_ws(p, end);
        if (p >= end) return MORE;
        if (*p != '"') return BAD;
        if ((r = scan_string(&p, end, &s, &n, &esc)) != OK) return r;
        p = skip_ws(p, end);
        if (p >= end) return MORE;
        if (*p != ':') return BAD;
        p++;
    }
}

/* ---- numbers of the fast path ---- */

static int is_number_start(char c) { return c == '-' || (c >= '0' && c <= '9'); }

/* A plain integer of at most ID_DIGITS digits (SLOW for any other number, BAD/MORE from the grammar). */
static int read_id(const char **pp, const char *end, int64_t *out) {
    num_t num;
    const char *p = *pp;
    int r = scan_number(&p, end, &num);
    if (r != OK) return r;
    *pp = p;
    if (num.frac_start || num.has_exp || num.int_digits > ID_DIGITS) return SLOW;
    int64_t v = (int64_t)num.int_value;  /* at most 18 digits: no wrap */
    *out = num.neg ? -v : v;
    return OK;
}

/* Microseconds as exact nanoseconds: Decimal(text) * 1000, to integral, half to even. */
static int read_us(const char **pp, const char *end, int64_t *out) {
    num_t num;
    const char *p = *pp;
    int r = scan_number(&p, end, &num);
    if (r != OK) return r;
    *pp = p;
    if (num.has_exp || num.int_digits > TS_INT_DIGITS || num.frac_digits > TS_FRAC_DIGITS) return SLOW;
    /* At most 15 integer digits times 1000 and 9 decimal digits: no wrap. */
    int64_t v = (int64_t)num.int_value * 1000;
    int fd = num.frac_digits;
    if (fd <= 3) {
        v += (int64_t)num.frac_value * POW10[3 - fd];
    } else {
        int64_t scale = POW10[fd - 3], rest = (int64_t)num.frac_value % scale, half = scale / 2;
        v += (int64_t)num.frac_value / scale;
        if (rest > half || (rest == half && (v & 1))) v++;
    }
    *out = num.neg ? -v : v;
    return OK;
}

/* A pid or tid: an integer, its digits as text, or a name with a letter (other text: slow, the reference decides). */
static int read_pid(Scanner *sc, const char **pp, const char *end, int64_t *out, int *is_str) {
    if (**pp != '"') { *is_str = 0; return read_id(pp, end, out); }
    const char *s;
    size_t n;
    int esc, r = scan_string(pp, end, &s, &n, &esc);
    if (r != OK) return r;
    /* Digits alone (with a minus): the number they write, as the reference's _int("123") reads it. */
    size_t sign = n && s[0] == '-', digits = 0;
    while (sign + digits < n && s[sign + digits] >= '0' && s[sign + digits] <= '9') digits++;
    if (!esc && digits && sign + digits == n && digits <= ID_DIGITS) {
        int64_t v = 0;
        for (size_t i = sign; i < n; i++) v = v * 10 + (s[i] - '0');
        *out = sign ? -v : v;
        *is_str = 0;
        return OK;
    }
    int letter = 0;
    for (size_t i = 0; i < n && !letter; i++) letter = ((s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'z');
    if (esc || !letter) return SLOW;
    int64_t id = intern(&sc->strings, s, n);
    if (id < 0) return -1;
    *out = id;
    *is_str = 1;
    return OK;
}

/* An object member's key and its colon: *pp ends on the value's first character. */
static int scan_key(const char **pp, const char *end, const char **s, size_t *n, int *esc) {
    const char *p = *pp;
    int r;
    if (*p != '"') return BAD;
    if ((r = scan_string(&p, end, s, n, esc)) != OK) return r;
    p = skip_ws(p, end);
    if (p >= end) return MORE;
    if (*p != ':') return BAD;
    p = skip_ws(p + 1, end);
    if (p >= end) return MORE;
    *pp = p;
    return OK;
}

#define KEY_IS(lit) (n == sizeof(lit) - 1 && memcmp(s, lit, sizeof(lit) - 1) == 0)

/* args: device, stream, bytes kept; any of them not a plain integer makes the event slow. */
static int scan_args(const char **pp, const char *end, int64_t *vals, int *flags, int *slow) {
    const char *p = *pp, *s;
    size_t n;
    int esc, r;
    if (*p != '{') { *slow = 1; return skip_value(pp, end); }
    *flags &= ~(F_DEVICE | F_STREAM | F_BYTES);  /* a second "args" replaces the first */
    p = skip_ws(p + 1, end);
    if (p >= end) return MORE;
    if (*p == '}') { *pp = p + 1; return OK; }
    for (;;) {
        if ((r = scan_key(&p, end, &s, &n, &esc)) != OK) return r;
        int which = esc ? -2 : KEY_IS("device") ? 0 : KEY_IS("stream") ? 1 : KEY_IS("bytes") ? 2 : -1;
        if (which == -2) *slow = 1;
        if (which >= 0 && !is_number_start(*p)) {  /* text, null, a container: the reference's _int decides */
            *slow = 1;
            if ((r = skip_value(&p, end)) != OK) return r;
        } else if (which >= 0) {
            r = read_id(&p, end, &vals[which]);
            if (r == SLOW) *slow = 1;
            else if (r != OK) return r;
            else *flags |= (which == 0 ? F_DEVICE : which == 1 ? F_STREAM : F_BYTES);
        } else if ((r = skip_value(&p, end)) != OK) {
            return r;
        }
        p = skip_ws(p, end);
        if (p >= end) return MORE;
        if (*p == '}') { *pp = p + 1; return OK; }
        if (*p != ',') return BAD;
        p = skip_ws(p + 1, end);
        if (p >= end) return MORE;
    }
}

enum { PH_NONE, PH_X, PH_OTHER, PH_ODD };

typedef struct {
    int ph, slow, esc_key, flags, has_name, has_ts, has_pid, has_tid, pid_str, tid_str;
    const char *name, *cat;
    size_t name_n, cat_n;
    int64_t ts, dur, pid, tid, args[3];
} event_t;

static int read_string_field(const char **pp, const char *end, const char **s, size_t *n, int *slow) {
    if (**pp != '"') { *slow = 1; return skip_value(pp, end); }
    int esc;
    return scan_string(pp, end, s, n, &esc);  /* escapes stay raw: kineto/fast.py decodes each distinct string once */
}

/* ts or dur: a number read by read_us; anything else (text, null, a container) makes the event slow. */
static int us_field(const char **pp, const char *end, int64_t *out, int *slow) {
    if (!is_number_start(**pp)) { *slow = 1; return skip_value(pp, end); }
    int r = read_us(pp, end, out);
    if (r == SLOW) { *slow = 1; return OK; }
    return r;
}

/* One member of an event object, its key already read. */
static int event_field(Scanner *sc, event_t *ev, const char *s, size_t n, int esc, const char **pp, const char *end) {
    int r, is_str;
    if (esc) { ev->slow = ev->esc_key = 1; return skip_value(pp, end); }
    switch (n) {
    case 2:
        if (KEY_IS("ph")) {
            const char *v;
            size_t vn;
            if (**pp != '"') { ev->ph = PH_OTHER; return skip_value(pp, end); }  /* == "X" is false */
            if ((r = scan_string(pp, end, &v, &vn, &esc)) != OK) return r;
            if (esc) ev->ph = PH_ODD;
            else if (vn == 1 && v[0] == 'X') ev->ph = PH_X;
            else if (vn == 1 && (v[0] == 'B' || v[0] == 'E' || v[0] == 'M')) ev->ph = PH_ODD;
            else ev->ph = PH_OTHER;
            return OK;
        }
        if (KEY_IS("ts")) {
            r = us_field(pp, end, &ev->ts, &ev->slow);
            if (r == OK) ev->has_ts = 1;
            return r;
        }
        break;
    case 3:
        if (KEY_IS("dur")) return us_field(pp, end, &ev->dur, &ev->slow);
        if (KEY_IS("cat")) {
            r = read_string_field(pp, end, &ev->cat, &ev->cat_n, &ev->slow);
            if (r == OK) ev->flags |= F_CAT;
            return r;
        }
        if (KEY_IS("pid") || KEY_IS("tid")) {
            int is_pid = s[0] == 'p';
            int64_t v = 0;
            if (**pp != '"' && !is_number_start(**pp)) { ev->slow = 1; return skip_value(pp, end); }
            r = read_pid(sc, pp, end, &v, &is_str);
            if (r == SLOW) { ev->slow = 1; return OK; }
            if (r != OK) return r;
            if (is_pid) { ev->pid = v; ev->has_pid = 1; ev->pid_str = is_str; }
            else { ev->tid = v; ev->has_tid = 1; ev->tid_str = is_str; }
            return OK;
        }
        break;
    case 4:
        if (KEY_IS("name")) {
            r = read_string_field(pp, end, &ev->name, &ev->name_n, &ev->slow);
            if (r == OK) ev->has_name = 1;
            return r;
        }
        if (KEY_IS("args")) return scan_args(pp, end, ev->args, &ev->flags, &ev->slow);
        break;
    }
    return skip_value(pp, end);
}

static int put_event(Scanner *sc, event_t *ev) {
    int64_t name = intern(&sc->strings, ev->name, ev->name_n), cat = -1;
    if (name < 0) return -1;
    if (ev->flags & F_CAT) {
        if ((cat = intern(&sc->strings, ev->cat, ev->cat_n)) < 0) return -1;
    }
    int32_t name32 = (int32_t)name, cat32 = (int32_t)cat;
    uint8_t flags = (uint8_t)(ev->flags | (ev->pid_str ? F_PID_STR : 0) | (ev->tid_str ? F_TID_STR : 0));
    /* One call per column with its constant size: col_put inlines to a store (a loop over the sizes
       called memcpy for each of the 11 values of every event). */
    col_t *c = sc->cols;
    if (col_put(sc, &c[0], &sc->seq, 8) < 0 || col_put(sc, &c[1], &ev->ts, 8) < 0 || col_put(sc, &c[2], &ev->dur, 8) < 0 ||
        col_put(sc, &c[3], &name32, 4) < 0 || col_put(sc, &c[4], &cat32, 4) < 0 || col_put(sc, &c[5], &ev->pid, 8) < 0 ||
        col_put(sc, &c[6], &ev->tid, 8) < 0 || col_put(sc, &c[7], &ev->args[0], 8) < 0 ||
        col_put(sc, &c[8], &ev->args[1], 8) < 0 || col_put(sc, &c[9], &ev->args[2], 8) < 0 || col_put(sc, &c[10], &flags, 1) < 0)
        return -1;
    return 0;
}

/* One element of traceEvents at *pp. Returns OK/MORE/BAD, or -1 with a Python error set. */
static int scan_event(Scanner *sc, const char **pp, const char *end) {
    const char *start = *pp, *p = *pp, *s;
    size_t n;
    int esc, r;
    if (*p != '{') return skip_value(pp, end);  /* not an object: not an event */
    event_t ev;
    memset(&ev, 0, sizeof ev);
    p = skip_ws(p + 1, end);
    if (p >= end) return MORE;
    if (*p != '}') {
        for (;;) {
            if ((r = scan_key(&p, end, &s, &n, &esc)) != OK) return r;
            if ((r = event_field(sc, &ev, s, n, esc, &p, end)) != OK) return r;
            p = skip_ws(p, end);
            if (p >= end) return MORE;
            if (*p == '}') break;
            if (*p != ',') return BAD;
            p = skip_ws(p + 1, end);
            if (p >= end) return MORE;
        }
    }
    p++;
    *pp = p;
    /* A flow, an instant, a counter: nothing the reader keeps (unless a key written with escapes is "ph"). */
    if ((ev.ph == PH_NONE || ev.ph == PH_OTHER) && !ev.esc_key) return OK;
    if (ev.dur < 0) ev.dur = 0;
    if (ev.slow || ev.ph == PH_ODD || !ev.has_name || !ev.has_ts || !ev.has_pid || !ev.has_tid) {
        gil_take(sc);
        PyObject *item = Py_BuildValue("(Ly#)", (long long)sc->seq, start, (Py_ssize_t)(p - start));
        int bad = !item || PyList_Append(sc->slow, item) < 0;
        Py_XDECREF(item);
        gil_drop(sc);
        return bad ? -1 : OK;
    }
    return put_event(sc, &ev) < 0 ? -1 : OK;
}

static const char *META_KEYS[] = {"baseTimeNanoseconds", "distributedInfo", "host_name", "schemaVersion",
                                  "deviceProperties", NULL};

/* One member of the top-level object, from its key (after a comma if one is due). */
static int scan_top_member(Scanner *sc, const char **pp, const char *end) {
    const char *p = *pp, *s, *v;
    size_t n;
    int esc, r;
    if (*p != '"') return BAD;
    if ((r = scan_string(&p, end, &s, &n, &esc)) != OK) return r;
    if (esc) return BAD;  /* a key the reference would read as another: read it all with the reference */
    p = skip_ws(p, end);
    if (p >= end) return MORE;
    if (*p != ':') return BAD;
    p = skip_ws(p + 1, end);
    if (p >= end) return MORE;
    if (KEY_IS("traceEvents")) {
        if (sc->seen_events || *p != '[') return BAD;  /* a second one, or no list: the reference decides */
        sc->seen_events = 1;
        sc->state = ST_EVENTS;
        sc->need_comma = 0;
        *pp = p + 1;
        return OK;
    }
    v = p;
    if ((r = skip_value(&p, end)) != OK) return r;
    for (const char **k = META_KEYS; *k; k++) {
        if (strlen(*k) == n && memcmp(*k, s, n) == 0) {
            gil_take(sc);
            PyObject *key = PyUnicode_FromStringAndSize(s, (Py_ssize_t)n);
            PyObject *val = PyBytes_FromStringAndSize(v, p - v);
            int bad = !key || !val || PyDict_SetItem(sc->meta, key, val) < 0;  /* the last one wins, as in json */
            Py_XDECREF(key);
            Py_XDECREF(val);
            gil_drop(sc);
            if (bad) return -1;
        }
    }
    sc->need_comma = 1;
    *pp = p;
    return OK;
}

/* One unit at *pp (whitespace skipped): the opening of the document, a top-level member,
   an event, a closing bracket, or a comma and what follows it. */
static int scan_unit(Scanner *sc, const char **pp, const char *end) {
    const char *p = *pp;
    int r;
    switch (sc->state) {
    case ST_START:
        if (*p == '{') { sc->state = ST_TOP; sc->need_comma = 0; }
        else if (*p == '[') { sc->state = ST_EVENTS; sc->top_is_array = 1; sc->seen_events = 1; sc->need_comma = 0; }
        else return BAD;
        *pp = p + 1;
        return OK;
    case ST_TOP:
        if (*p == '}') { sc->state = ST_DONE; *pp = p + 1; return OK; }
        if (sc->need_comma) {
            if (*p != ',') return BAD;
            p = skip_ws(p + 1, end);
            if (p >= end) return MORE;
        }
        r = scan_top_member(sc, &p, end);
        if (r == OK) *pp = p;
        return r;
    case ST_EVENTS:
        if (*p == ']') {
            sc->state = sc->top_is_array ? ST_DONE : ST_TOP;
            sc->need_comma = 1;
            *pp = p + 1;
            return OK;
        }
        if (sc->need_comma) {
            if (*p != ',') return BAD;
            p = skip_ws(p + 1, end);
            if (p >= end) return MORE;
        }
        r = scan_event(sc, &p, end);
        if (r == OK) { sc->seq++; sc->need_comma = 1; *pp = p; }
        return r;
    default:
        return BAD;  /* anything but whitespace after the document */
    }
}

static PyObject *Scanner_feed(Scanner *sc, PyObject *args) {
    Py_buffer view;
    int final;
    if (!PyArg_ParseTuple(args, "y*p", &view, &final)) return NULL;
    if (sc->feeding) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_RuntimeError, "this scanner is being fed by another thread");
        return NULL;
    }
    const char *base = view.buf, *p = base, *end = base + view.len;
    int r = OK;
    sc->feeding = 1;
    sc->unlocked = PyEval_SaveThread();  /* the buffer stays exported (view): nobody resizes it meanwhile */
    for (;;) {
        p = skip_ws(p, end);
        if (p >= end) break;
        const char *unit = p;
        r = scan_unit(sc, &p, end);
        if (r != OK) { p = unit; break; }
    }
    PyEval_RestoreThread(sc->unlocked);
    sc->unlocked = NULL;
    sc->feeding = 0;
    PyBuffer_Release(&view);
    if (r < 0) {
        if (!PyErr_Occurred()) {  /* the string table's: it sets no Python error without the GIL */
            if (sc->strings.overflow) PyErr_SetString(PyExc_OverflowError, "too many distinct strings");
            else PyErr_NoMemory();
        }
        return NULL;
    }
    if (r == BAD || (final && (r == MORE || sc->state != ST_DONE))) {
        PyErr_Format(ScanError, "not the JSON this scanner reads, near byte %zd of the piece", (Py_ssize_t)(p - base));
        return NULL;
    }
    return PyLong_FromSsize_t(p - base);
}

static int refuse_while_feeding(Scanner *sc) {
    if (!sc->feeding) return 0;
    PyErr_SetString(PyExc_RuntimeError, "this scanner is being fed by another thread");
    return -1;
}

/* A fresh scanner put just after an element of traceEvents, before its comma: it scans the part of
   a file from there (a second thread's part, kineto/stream.py); its seq counts from 0 there. */
static PyObject *Scanner_resume_in_events(Scanner *sc, PyObject *args) {
    int top_is_array;
    if (!PyArg_ParseTuple(args, "p", &top_is_array)) return NULL;
    if (sc->state != ST_START || sc->seq != 0 || sc->feeding) {
        PyErr_SetString(PyExc_RuntimeError, "resume_in_events needs a fresh scanner");
        return NULL;
    }
    sc->state = ST_EVENTS;
    sc->need_comma = 1;
    sc->seen_events = 1;
    sc->top_is_array = top_is_array;
    return Py_NewRef(Py_None);
}

/* (elements of traceEvents so far, whether the document is a bare array) where the scanner stands
   just after an element of traceEvents, before its comma; else None. Where one scanner stopped in
   that state another resumed there (resume_in_events) reads the rest as this one would. */
static PyObject *Scanner_between_events(Scanner *sc, PyObject *unused) {
    if (sc->state != ST_EVENTS || !sc->need_comma || sc->feeding) return Py_NewRef(Py_None);
    return Py_BuildValue("(LO)", (long long)sc->seq, sc->top_is_array ? Py_True : Py_False);
}

/* The columns as a dict of bytes (the scanner's own, not copies; it keeps none). */
static PyObject *Scanner_take_columns(Scanner *sc, PyObject *unused) {
    if (refuse_while_feeding(sc) < 0) return NULL;
    PyObject *out = PyDict_New();
    if (!out) return NULL;
    for (int i = 0; i < NCOLS; i++) {
        col_t *c = &sc->cols[i];
        PyObject *b = c->bytes;
        if (!b) b = PyBytes_FromStringAndSize("", 0);
        else if (_PyBytes_Resize(&b, (Py_ssize_t)c->len) < 0) b = NULL;  /* shrinks in place */
        c->bytes = NULL;
        c->len = c->cap = 0;
        if (!b || PyDict_SetItemString(out, COL_NAMES[i], b) < 0) { Py_XDECREF(b); Py_DECREF(out); return NULL; }
        Py_DECREF(b);
    }
    return out;
}

/* The string table: a list of the raw bytes of each id. */
static PyObject *Scanner_strings(Scanner *sc, PyObject *unused) {
    if (refuse_while_feeding(sc) < 0) return NULL;
    PyObject *out = PyList_New(sc->strings.count);
    if (!out) return NULL;
    uint64_t *offs = (uint64_t *)sc->strings.offsets.data;
    for (uint32_t id = 0; id < sc->strings.count; id++) {
        PyObject *b = PyBytes_FromStringAndSize(sc->strings.arena.data + offs[id], (Py_ssize_t)(offs[id + 1] - offs[id]));
        if (!b) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, id, b);
    }
    return out;
}

static PyObject *Scanner_slow(Scanner *sc, PyObject *unused) { return Py_NewRef(sc->slow); }
static PyObject *Scanner_meta(Scanner *sc, PyObject *unused) { return Py_NewRef(sc->meta); }

static PyObject *Scanner_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    Scanner *sc = (Scanner *)type->tp_alloc(type, 0);
    if (!sc) return NULL;
    sc->strings.seed = random_seed(sc);
    sc->slow = PyList_New(0);
    sc->meta = PyDict_New();
    if (!sc->slow || !sc->meta) { Py_DECREF(sc); return NULL; }
    return (PyObject *)sc;
}

static void Scanner_dealloc(Scanner *sc) {
    for (int i = 0; i < NCOLS; i++) Py_CLEAR(sc->cols[i].bytes);
    intern_free(&sc->strings);
    Py_XDECREF(sc->slow);
    Py_XDECREF(sc->meta);
    Py_TYPE(sc)->tp_free((PyObject *)sc);
}

static PyMethodDef Scanner_methods[] = {
    {"feed", (PyCFunction)Scanner_feed, METH_VARARGS, "feed(buffer, final) -> bytes consumed (whole units)"},
    {"take_columns", (PyCFunction)Scanner_take_columns, METH_NOARGS, "the fast events' columns, as bytes"},
    {"strings", (PyCFunction)Scanner_strings, METH_NOARGS, "raw bytes of each string id"},
    {"slow", (PyCFunction)Scanner_slow, METH_NOARGS, "[(seq, bytes of the event)]"},
    {"meta", (PyCFunction)Scanner_meta, METH_NOARGS, "{top-level key: bytes of its value}"},
    {"resume_in_events", (PyCFunction)Scanner_resume_in_events, METH_VARARGS,
     "resume_in_events(top_is_array): a fresh scanner set just after an element of traceEvents"},
    {"between_events", (PyCFunction)Scanner_between_events, METH_NOARGS,
     "(elements so far, top is an array) where it stands just after an element of traceEvents, else None"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "scaldiag.readers._kineto_scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Scanner_new,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kineto_scan", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__kineto_scan(void) {
    init_tables();
    if (PyType_Ready(&ScannerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    ScanError = PyErr_NewException("scaldiag.readers._kineto_scan.ScanError", PyExc_ValueError, NULL);
    if (!ScanError || PyModule_AddObjectRef(m, "ScanError", ScanError) < 0 ||
        PyModule_AddObjectRef(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
