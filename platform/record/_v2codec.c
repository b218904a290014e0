/* ember.record._v2codec: Kafka RecordBatch v2 records sections <-> Arrow column buffers, one call per batch.
 *
 * decode() walks a (decompressed) records section twice without the GIL: pass 1 validates every record
 * and sums the sizes of each output buffer, pass 2 fills buffers allocated once at their exact sizes.
 * encode() does the reverse from the buffers of Arrow arrays (which may be slices with offsets and nulls).
 * frame_bound() walks lz4 / zstd frames and xerial snappy streams for an upper bound of their decompressed
 * size, so the caller can refuse decompression bombs before allocating. ember.record.kafka_v2 is the
 * Python side; nothing here knows Arrow's Python API: buffers in, bytes objects out.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *CorruptError;  /* structural damage: ember.errors.CorruptRecord */
static PyObject *InvalidError;  /* well-formed but unacceptable: ember.errors.InvalidRecord */

/* ---------------------------------------------------------------- varints ---- */

/* zigzag varint (int32, at most 5 bytes); 0 ok, -1 truncated, -2 too long */
static inline int
rd_varint(const uint8_t **pp, const uint8_t *end, int32_t *out)
{
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) {
        uint32_t v = *p;
        *out = (int32_t)((v >> 1) ^ (0u - (v & 1)));
        *pp = p + 1;
        return 0;
    }
    uint32_t v = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        if (p >= end)
            return -1;
        uint8_t b = *p++;
        v |= (uint32_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int32_t)((v >> 1) ^ (0u - (v & 1)));
            *pp = p;
            return 0;
        }
    }
    return -2;
}

/* zigzag varlong (int64, at most 10 bytes) */
static inline int
rd_varlong(const uint8_t **pp, const uint8_t *end, int64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end)
            return -1;
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)((v >> 1) ^ (0ull - (v & 1)));
            *pp = p;
            return 0;
        }
    }
    return -2;
}

static inline int
varint_size(int32_t value)
{
    uint32_t v = ((uint32_t)value << 1) ^ (uint32_t)(value >> 31);
    int n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline int
varlong_size(int64_t value)
{
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    int n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *
wr_varint(uint8_t *p, int32_t value)
{
    uint32_t v = ((uint32_t)value << 1) ^ (uint32_t)(value >> 31);
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static inline uint8_t *
wr_varlong(uint8_t *p, int64_t value)
{
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* strict UTF-8 (as Python's decoder and Arrow's validation): no overlongs, surrogates or > U+10FFFF */
static int
utf8_ok(const uint8_t *s, int64_t n)
{
    int64_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c < 0xC2)
            return 0;
        if (c < 0xE0) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80)
                return 0;
            i += 2;
            continue;
        }
        if (c < 0xF0) {
            if (i + 2 >= n)
                return 0;
            uint8_t c1 = s[i + 1];
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80)
                return 0;
            if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0))
                return 0;
            i += 3;
            continue;
        }
        if (c < 0xF5) {
            if (i + 3 >= n)
                return 0;
            uint8_t c1 = s[i + 1];
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if ((c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 >= 0x90))
                return 0;
            i += 4;
            continue;
        }
        return 0;
    }
    return 1;
}

/* ----------------------------------------------------------------- decode ---- */

enum {
    E_OK = 0,
    E_TRUNCATED,       /* a varint or fixed field runs past its record */
    E_VARINT_LONG,
    E_REC_LENGTH,      /* record length negative or past the end of the section */
    E_REC_MISMATCH,    /* record length does not match its fields */
    E_KEY_LENGTH,
    E_VALUE_LENGTH,
    E_HCOUNT,
    E_HKEY_LENGTH,
    E_HKEY_UTF8,
    E_HVALUE_LENGTH,
    E_TOO_MANY,        /* more records than the header says */
    E_TOO_FEW,
    E_OFFSET_DELTA,    /* InvalidRecord */
};

typedef struct {
    int code;
    int64_t record;   /* index of the record at fault */
    int64_t pos;      /* byte position in the section */
    int64_t value;    /* the offending number */
    int64_t count;    /* records found (E_TOO_FEW) */
} DecodeError;

typedef struct {
    int64_t n;
    int64_t key_bytes, key_nulls;
    int64_t value_bytes, value_nulls;
    int64_t headers, with_headers;
    int64_t hkey_bytes, hvalue_bytes, hvalue_nulls;
} Sizes;

typedef struct {
    int64_t *offsets; int64_t base_offset;
    int64_t *ts;
    uint8_t *key_valid; int32_t *key_off; uint8_t *key_data;
    uint8_t *value_valid; int32_t *value_off; uint8_t *value_data;
    uint8_t *list_valid; int32_t *list_off;
    int32_t *hkey_off; uint8_t *hkey_data;
    uint8_t *hvalue_valid; int32_t *hvalue_off; uint8_t *hvalue_data;
} Out;

#define FAIL(c, v) do { err->code = (c); err->record = i; err->pos = (int64_t)(p - start); err->value = (v); \
                        return -1; } while (0)
#define VARINT(dst) do { int r_ = rd_varint(&p, rend, &(dst)); \
                         if (r_) FAIL(r_ == -1 ? E_TRUNCATED : E_VARINT_LONG, 0); } while (0)

/* Pass 1: validate every record and size the outputs. */
static int
scan(const uint8_t *start, int64_t size, int64_t count, int64_t max_delta, Sizes *s, DecodeError *err)
{
    const uint8_t *p = start, *end = start + size;
    int64_t i = 0, previous_delta = -1;
    memset(s, 0, sizeof(*s));
    while (p < end) {
        const uint8_t *rend = end;
        int32_t len;
        if (i >= count)
            FAIL(E_TOO_MANY, count);
        VARINT(len);
        if (len < 0 || len > end - p)
            FAIL(E_REC_LENGTH, len);
        rend = p + len;
        if (p >= rend)
            FAIL(E_TRUNCATED, 0);
        p++;  /* attributes: unused */
        int64_t ts_delta;
        int r = rd_varlong(&p, rend, &ts_delta);
        if (r)
            FAIL(r == -1 ? E_TRUNCATED : E_VARINT_LONG, 0);
        int32_t off_delta;
        VARINT(off_delta);
        /* dense (max_delta < 0): 0, 1, 2, ...; else ascending with gaps up to max_delta (a cleaned batch) */
        if (max_delta < 0 ? off_delta != i : (off_delta <= previous_delta || off_delta > max_delta))
            FAIL(E_OFFSET_DELTA, off_delta);
        previous_delta = off_delta;
        int32_t klen;
        VARINT(klen);
        if (klen < -1 || klen > rend - p)
            FAIL(E_KEY_LENGTH, klen);
        if (klen < 0) {
            s->key_nulls++;
        } else {
            p += klen;
            s->key_bytes += klen;
        }
        int32_t vlen;
        VARINT(vlen);
        if (vlen < -1 || vlen > rend - p)
            FAIL(E_VALUE_LENGTH, vlen);
        if (vlen < 0) {
            s->value_nulls++;
        } else {
            p += vlen;
            s->value_bytes += vlen;
        }
        int32_t hcount;
        VARINT(hcount);
        if (hcount < 0 || hcount > (rend - p) / 2)  /* a header takes at least 2 bytes */
            FAIL(E_HCOUNT, hcount);
        if (hcount > 0)
            s->with_headers++;
        s->headers += hcount;
        for (int32_t h = 0; h < hcount; h++) {
            int32_t hk;
            VARINT(hk);
            if (hk < 0 || hk > rend - p)
                FAIL(E_HKEY_LENGTH, hk);
            if (!utf8_ok(p, hk))
                FAIL(E_HKEY_UTF8, h);
            p += hk;
            s->hkey_bytes += hk;
            int32_t hv;
            VARINT(hv);
            if (hv < -1 || hv > rend - p)
                FAIL(E_HVALUE_LENGTH, hv);
            if (hv < 0) {
                s->hvalue_nulls++;
            } else {
                p += hv;
                s->hvalue_bytes += hv;
            }
        }
        if (p != rend)
            FAIL(E_REC_MISMATCH, len);
        i++;
    }
    if (i != count) {
        err->code = E_TOO_FEW;
        err->record = i;
        err->pos = size;
        err->value = count;
        err->count = i;
        return -1;
    }
    s->n = i;
    return 0;
}

#define SETBIT(bm, k) ((bm)[(k) >> 3] |= (uint8_t)(1u << ((k) & 7)))

/* Pass 2: fill the outputs; the section has passed scan(), so every read is in bounds. */
static void
fill(const uint8_t *start, int64_t size, int64_t base_ts, int lat, int64_t lat_ts, Out *o)
{
    const uint8_t *p = start, *end = start + size;
    int64_t i = 0, h_total = 0;
    int32_t koff = 0, voff = 0, hkoff = 0, hvoff = 0;
    if (o->key_off) o->key_off[0] = 0;
    o->value_off[0] = 0;
    if (o->list_off) {
        o->list_off[0] = 0;
        o->hkey_off[0] = 0;
        o->hvalue_off[0] = 0;
    }
    while (p < end) {
        int32_t len = 0, off_delta = 0, klen = 0, vlen = 0, hcount = 0;
        int64_t ts_delta = 0;
        rd_varint(&p, end, &len);
        const uint8_t *rend = p + len;
        p++;
        rd_varlong(&p, rend, &ts_delta);
        o->ts[i] = lat ? lat_ts : (int64_t)((uint64_t)base_ts + (uint64_t)ts_delta);
        rd_varint(&p, rend, &off_delta);
        o->offsets[i] = (int64_t)((uint64_t)o->base_offset + (uint64_t)off_delta);
        rd_varint(&p, rend, &klen);
        if (klen >= 0) {
            memcpy(o->key_data + koff, p, (size_t)klen);
            p += klen;
            koff += klen;
            if (o->key_valid) SETBIT(o->key_valid, i);
        }
        o->key_off[i + 1] = koff;
        rd_varint(&p, rend, &vlen);
        if (vlen >= 0) {
            memcpy(o->value_data + voff, p, (size_t)vlen);
            p += vlen;
            voff += vlen;
            if (o->value_valid) SETBIT(o->value_valid, i);
        }
        o->value_off[i + 1] = voff;
        rd_varint(&p, rend, &hcount);
        for (int32_t h = 0; h < hcount; h++) {
            int32_t hk = 0, hv = 0;
            rd_varint(&p, rend, &hk);
            memcpy(o->hkey_data + hkoff, p, (size_t)hk);
            p += hk;
            hkoff += hk;
            o->hkey_off[h_total + 1] = hkoff;
            rd_varint(&p, rend, &hv);
            if (hv >= 0) {
                memcpy(o->hvalue_data + hvoff, p, (size_t)hv);
                p += hv;
                hvoff += hv;
                if (o->hvalue_valid) SETBIT(o->hvalue_valid, h_total);
            }
            o->hvalue_off[h_total + 1] = hvoff;
            h_total++;
        }
        if (o->list_off) {
            o->list_off[i + 1] = (int32_t)h_total;
            if (hcount > 0) SETBIT(o->list_valid, i);
        }
        p = rend;
        i++;
    }
}

static PyObject *
decode_error(const DecodeError *e)
{
    const char *what;
    switch (e->code) {
    case E_TRUNCATED: what = "truncated field"; break;
    case E_VARINT_LONG: what = "varint longer than its type"; break;
    case E_REC_LENGTH: what = "record length past the end of the records"; break;
    case E_REC_MISMATCH: what = "record length does not match its fields"; break;
    case E_KEY_LENGTH: what = "key length past the end of its record"; break;
    case E_VALUE_LENGTH: what = "value length past the end of its record"; break;
    case E_HCOUNT: what = "header count past the end of its record"; break;
    case E_HKEY_LENGTH: what = "header key length invalid or past the end of its record"; break;
    case E_HKEY_UTF8: what = "header key is not valid UTF-8 (header index in value)"; break;
    case E_HVALUE_LENGTH: what = "header value length past the end of its record"; break;
    case E_TOO_MANY:
        PyErr_Format(CorruptError, "record batch holds more records than its header says (%lld)",
                     (long long)e->value);
        return NULL;
    case E_TOO_FEW:
        PyErr_Format(CorruptError, "record batch holds %lld records, its header says %lld",
                     (long long)e->count, (long long)e->value);
        return NULL;
    case E_OFFSET_DELTA:
        PyErr_Format(InvalidError, "record %lld has offset delta %lld: offset deltas must run 0, 1, 2, ... "
                     "(ascending up to the batch's last offset delta in a cleaned batch)", (long long)e->record,
                     (long long)e->value);
        return NULL;
    default: what = "unknown error"; break;
    }
    PyErr_Format(CorruptError, "record %lld at byte %lld of the records: %s (%lld)", (long long)e->record,
                 (long long)e->pos, what, (long long)e->value);
    return NULL;
}

/* a bytes object of `size` bytes to fill; *ptr its data. zeroed: bitmaps are or-ed into. */
static PyObject *
new_buffer(int64_t size, int zeroed, void *ptr)
{
    PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (b == NULL)
        return NULL;
    if (zeroed && size)
        memset(PyBytes_AS_STRING(b), 0, (size_t)size);
    *(void **)ptr = PyBytes_AS_STRING(b);
    return b;
}

PyDoc_STRVAR(decode_doc,
"decode(section, count, base_offset, base_timestamp, log_append_time, max_timestamp, build=True,\n"
"       max_offset_delta=-1)\n\n"
"Validate a records section of `count` records; without build, return how many have a null key; with\n"
"build, return its column buffers:\n"
"(offsets, timestamps, key_valid, key_offsets, key_data, key_nulls, value_valid, value_offsets, value_data,\n"
" value_nulls, list_valid, list_offsets, with_headers, hkey_offsets, hkey_data, hvalue_valid,\n"
" hvalue_offsets, hvalue_data, hvalue_nulls, header_count); validity buffers are None when nothing is\n"
"null, list buffers None when no record has headers. Offset deltas must run 0, 1, 2, ... unless\n"
"max_offset_delta >= 0 (a stored batch the log cleaner rewrote): then they ascend, with gaps, up to it.");

static PyObject *
v2_decode(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"section", "count", "base_offset", "base_timestamp", "log_append_time", "max_timestamp", "build",
                             "max_offset_delta", NULL};
    Py_buffer view;
    long long count, base_offset, base_ts, lat_ts, max_delta = -1;
    int lat, build = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*LLLpL|pL", kwlist, &view, &count, &base_offset, &base_ts, &lat, &lat_ts,
                                     &build, &max_delta))
        return NULL;
    PyObject *result = NULL;
    PyObject *bufs[16] = {NULL};
    Sizes s;
    DecodeError err = {0};
    int rc;
    if (view.len > INT32_MAX) {
        PyErr_SetString(CorruptError, "records section over 2 GiB");
        goto done;
    }
    if (count < 0) {
        PyErr_Format(CorruptError, "negative record count %lld", count);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = scan((const uint8_t *)view.buf, view.len, count, max_delta, &s, &err);
    Py_END_ALLOW_THREADS
    if (rc) {
        decode_error(&err);
        goto done;
    }
    if (!build) {
        result = PyLong_FromLongLong((long long)s.key_nulls);
        goto done;
    }
    Out o;
    memset(&o, 0, sizeof(o));
    int64_t n = s.n, bm = (n + 7) / 8, hbm = (s.headers + 7) / 8;
    int k = 0;
    o.base_offset = base_offset;
    if (!(bufs[k++] = new_buffer(n * 8, 0, &o.offsets))) goto done;
    if (!(bufs[k++] = new_buffer(n * 8, 0, &o.ts))) goto done;
    if (s.key_nulls) { if (!(bufs[k] = new_buffer(bm, 1, &o.key_valid))) goto done; }
    k++;
    if (!(bufs[k++] = new_buffer((n + 1) * 4, 0, &o.key_off))) goto done;
    if (!(bufs[k++] = new_buffer(s.key_bytes, 0, &o.key_data))) goto done;
    if (s.value_nulls) { if (!(bufs[k] = new_buffer(bm, 1, &o.value_valid))) goto done; }
    k++;
    if (!(bufs[k++] = new_buffer((n + 1) * 4, 0, &o.value_off))) goto done;
    if (!(bufs[k++] = new_buffer(s.value_bytes, 0, &o.value_data))) goto done;
    if (s.with_headers) {
        if (!(bufs[k++] = new_buffer(bm, 1, &o.list_valid))) goto done;
        if (!(bufs[k++] = new_buffer((n + 1) * 4, 0, &o.list_off))) goto done;
        if (!(bufs[k++] = new_buffer((s.headers + 1) * 4, 0, &o.hkey_off))) goto done;
        if (!(bufs[k++] = new_buffer(s.hkey_bytes, 0, &o.hkey_data))) goto done;
        if (s.hvalue_nulls) { if (!(bufs[k] = new_buffer(hbm, 1, &o.hvalue_valid))) goto done; }
        k++;
        if (!(bufs[k++] = new_buffer((s.headers + 1) * 4, 0, &o.hvalue_off))) goto done;
        if (!(bufs[k++] = new_buffer(s.hvalue_bytes, 0, &o.hvalue_data))) goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    fill((const uint8_t *)view.buf, view.len, base_ts, lat, lat_ts, &o);
    Py_END_ALLOW_THREADS
#define B(j) (bufs[j] ? bufs[j] : Py_None)
    result = Py_BuildValue("(OOOOOLOOOLOOLOOOOOLL)", B(0), B(1), B(2), B(3), B(4), (long long)s.key_nulls, B(5),
                           B(6), B(7), (long long)s.value_nulls, B(8), B(9), (long long)s.with_headers, B(10),
                           B(11), B(12), B(13), B(14), (long long)s.hvalue_nulls, (long long)s.headers);
#undef B
done:
    for (int j = 0; j < 16; j++)
        Py_XDECREF(bufs[j]);
    PyBuffer_Release(&view);
    return result;
}

/* ----------------------------------------------------------------- encode ---- */

typedef struct {   /* one Arrow binary/string array (or int64 / list offsets) as raw buffers */
    Py_buffer valid, offsets, data;
    int has_valid, has_offsets, has_data;
    int64_t offset;   /* the array's logical offset */
} Col;

static void
col_release(Col *c)
{
    if (c->has_valid) PyBuffer_Release(&c->valid);
    if (c->has_offsets) PyBuffer_Release(&c->offsets);
    if (c->has_data) PyBuffer_Release(&c->data);
    c->has_valid = c->has_offsets = c->has_data = 0;
}

static int
get_buf(PyObject *obj, Py_buffer *view, int *has)
{
    if (obj == Py_None)
        return 0;
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return -1;
    *has = 1;
    return 0;
}

/* (validity|None, offsets|None, data|None, offset) */
static int
col_parse(PyObject *tuple, Col *c, const char *name)
{
    PyObject *valid, *offsets, *data;
    long long offset;
    if (!PyArg_ParseTuple(tuple, "OOOL", &valid, &offsets, &data, &offset)) {
        PyErr_Format(PyExc_TypeError, "column %s: expected (validity, offsets, data, offset)", name);
        return -1;
    }
    c->offset = offset;
    if (offset < 0) {
        PyErr_Format(PyExc_ValueError, "column %s: negative offset", name);
        return -1;
    }
    if (get_buf(valid, &c->valid, &c->has_valid) || get_buf(offsets, &c->offsets, &c->has_offsets)
        || get_buf(data, &c->data, &c->has_data))
        return -1;
    return 0;
}

static inline int
col_is_valid(const Col *c, int64_t k)
{
    if (!c->has_valid) return 1;
    int64_t j = c->offset + k;
    return (((const uint8_t *)c->valid.buf)[j >> 3] >> (j & 7)) & 1;
}

static inline int32_t
col_off(const Col *c, int64_t k)
{
    return ((const int32_t *)c->offsets.buf)[c->offset + k];
}

/* Check a binary column of `n` entries: buffers long enough, offsets ascending within the data. */
static int
col_check_binary(const Col *c, int64_t n, const char *name)
{
    if (!c->has_offsets) {
        PyErr_Format(PyExc_ValueError, "column %s: no offsets buffer", name);
        return -1;
    }
    if ((c->offset + n + 1) * 4 > c->offsets.len) {
        PyErr_Format(PyExc_ValueError, "column %s: offsets buffer too short", name);
        return -1;
    }
    if (c->has_valid && (c->offset + n + 7) / 8 > c->valid.len) {
        PyErr_Format(PyExc_ValueError, "column %s: validity buffer too short", name);
        return -1;
    }
    int64_t data_len = c->has_data ? c->data.len : 0;
    for (int64_t k = 0; k < n; k++) {
        int32_t a = col_off(c, k), b = col_off(c, k + 1);
        if (a < 0 || b < a || b > data_len) {
            PyErr_Format(PyExc_ValueError, "column %s: offsets out of order or past its data at %lld", name,
                         (long long)k);
            return -1;
        }
    }
    return 0;
}

typedef struct {
    int64_t n;
    const int64_t *ts;
    Col key, value, list, hkey, hvalue;
    int has_headers;
    int64_t base_ts;
    int64_t max_ts;
    const int32_t *deltas;   /* each record's offset delta, or NULL: 0, 1, 2, ... */
    int32_t *body;    /* per-record body sizes (pass 1) */
} Enc;

/* Pass 1: each record's body size; -1 on a too-big record, -2 on a null header key. */
static int64_t
enc_size(Enc *e)
{
    int64_t total = 0, max_ts = INT64_MIN;
    for (int64_t i = 0; i < e->n; i++) {
        int64_t ts = e->ts[i];
        if (ts > max_ts) max_ts = ts;
        int64_t body = 1 + varlong_size((int64_t)((uint64_t)ts - (uint64_t)e->base_ts))
                       + varint_size(e->deltas ? e->deltas[i] : (int32_t)i);
        if (col_is_valid(&e->key, i)) {
            int32_t l = col_off(&e->key, i + 1) - col_off(&e->key, i);
            body += varint_size(l) + l;
        } else {
            body += 1;
        }
        if (col_is_valid(&e->value, i)) {
            int32_t l = col_off(&e->value, i + 1) - col_off(&e->value, i);
            body += varint_size(l) + l;
        } else {
            body += 1;
        }
        int32_t hcount = 0, h0 = 0;
        if (e->has_headers && col_is_valid(&e->list, i)) {
            h0 = col_off(&e->list, i);
            hcount = col_off(&e->list, i + 1) - h0;
        }
        body += varint_size(hcount);
        for (int32_t h = h0; h < h0 + hcount; h++) {
            if (!col_is_valid(&e->hkey, h))
                return -2;
            int32_t l = col_off(&e->hkey, h + 1) - col_off(&e->hkey, h);
            body += varint_size(l) + l;
            if (col_is_valid(&e->hvalue, h)) {
                l = col_off(&e->hvalue, h + 1) - col_off(&e->hvalue, h);
                body += varint_size(l) + l;
            } else {
                body += 1;
            }
        }
        if (body > INT32_MAX - 5)
            return -1;
        e->body[i] = (int32_t)body;
        total += varint_size((int32_t)body) + body;
        if (total > INT32_MAX - 61)
            return -1;
    }
    e->max_ts = max_ts;
    return total;
}

static inline uint8_t *
wr_bytes(uint8_t *p, const Col *c, int64_t k)
{
    if (!col_is_valid(c, k)) {
        *p++ = 1;  /* zigzag(-1) */
        return p;
    }
    int32_t a = col_off(c, k), l = col_off(c, k + 1) - a;
    p = wr_varint(p, l);
    memcpy(p, (const uint8_t *)c->data.buf + a, (size_t)l);
    return p + l;
}

/* Pass 2 */
static void
enc_fill(Enc *e, uint8_t *p)
{
    for (int64_t i = 0; i < e->n; i++) {
        p = wr_varint(p, e->body[i]);
        *p++ = 0;
        p = wr_varlong(p, (int64_t)((uint64_t)e->ts[i] - (uint64_t)e->base_ts));
        p = wr_varint(p, e->deltas ? e->deltas[i] : (int32_t)i);
        p = wr_bytes(p, &e->key, i);
        p = wr_bytes(p, &e->value, i);
        int32_t hcount = 0, h0 = 0;
        if (e->has_headers && col_is_valid(&e->list, i)) {
            h0 = col_off(&e->list, i);
            hcount = col_off(&e->list, i + 1) - h0;
        }
        p = wr_varint(p, hcount);
        for (int32_t h = h0; h < h0 + hcount; h++) {
            p = wr_bytes(p, &e->hkey, h);
            p = wr_bytes(p, &e->hvalue, h);
        }
    }
}

static inline void
put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

static inline void
put_be64(uint8_t *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

PyDoc_STRVAR(encode_doc,
"encode(n, timestamps, key, value, headers, base_timestamp, header, crc, deltas=None)\n\n"
"The records section of n records, or with header (61 packed bytes) the whole uncompressed batch.\n"
"timestamps: (int64 buffer, offset); key, value: (validity, offsets, data, offset); headers: None or\n"
"((list validity, list offsets, None, list offset), header key column, header value column) where the\n"
"header columns' offsets already include the struct's. base_timestamp None: the first record's. With\n"
"header, batch_length, base/max timestamp (when base_timestamp is None) and the CRC (crc(memoryview) ->\n"
"int over bytes 21..end) are patched in. deltas: None (offset deltas 0, 1, 2, ...) or (int32 buffer, offset)\n"
"of ascending offset deltas (the log cleaner keeps records at their offsets). Returns (bytes,\n"
"first_timestamp, max_timestamp).");

static PyObject *
v2_encode(PyObject *self, PyObject *args)
{
    long long n;
    PyObject *ts_t, *key_t, *value_t, *headers_t, *base_obj, *header_obj, *crc_fn, *deltas_t = Py_None;
    if (!PyArg_ParseTuple(args, "LOOOOOOO|O", &n, &ts_t, &key_t, &value_t, &headers_t, &base_obj, &header_obj,
                          &crc_fn, &deltas_t))
        return NULL;
    Enc e;
    memset(&e, 0, sizeof(e));
    e.n = n;
    Py_buffer ts_view, deltas_view;
    int has_ts = 0, has_deltas = 0;
    PyObject *result = NULL, *out = NULL;
    PyObject *ts_buf;
    long long ts_offset;
    if (n <= 0 || n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "a record batch holds 1 to 2^31-1 records");
        return NULL;
    }
    if (!PyArg_ParseTuple(ts_t, "OL", &ts_buf, &ts_offset))
        return NULL;
    if (PyObject_GetBuffer(ts_buf, &ts_view, PyBUF_SIMPLE) < 0)
        return NULL;
    has_ts = 1;
    if (ts_offset < 0 || (ts_offset + n) * 8 > ts_view.len) {
        PyErr_SetString(PyExc_ValueError, "timestamp buffer too short");
        goto done;
    }
    e.ts = (const int64_t *)ts_view.buf + ts_offset;
    if (deltas_t != Py_None) {
        PyObject *deltas_buf;
        long long deltas_offset;
        if (!PyArg_ParseTuple(deltas_t, "OL", &deltas_buf, &deltas_offset))
            goto done;
        if (PyObject_GetBuffer(deltas_buf, &deltas_view, PyBUF_SIMPLE) < 0)
            goto done;
        has_deltas = 1;
        if (deltas_offset < 0 || (deltas_offset + n) * 4 > deltas_view.len) {
            PyErr_SetString(PyExc_ValueError, "offset delta buffer too short");
            goto done;
        }
        e.deltas = (const int32_t *)deltas_view.buf + deltas_offset;
        for (int64_t k = 0; k < n; k++) {
            if (e.deltas[k] < 0 || (k > 0 && e.deltas[k] <= e.deltas[k - 1])) {
                PyErr_SetString(PyExc_ValueError, "offset deltas must be non-negative and ascending");
                goto done;
            }
        }
    }
    if (col_parse(key_t, &e.key, "key") || col_check_binary(&e.key, n, "key"))
        goto done;
    if (col_parse(value_t, &e.value, "value") || col_check_binary(&e.value, n, "value"))
        goto done;
    if (headers_t != Py_None) {
        PyObject *list_t, *hk_t, *hv_t;
        if (!PyArg_ParseTuple(headers_t, "OOO", &list_t, &hk_t, &hv_t))
            goto done;
        e.has_headers = 1;
        if (col_parse(list_t, &e.list, "headers"))
            goto done;
        /* the list offsets index header entries: check them like a binary column's, against the entry count */
        if (!e.list.has_offsets || (e.list.offset + n + 1) * 4 > e.list.offsets.len
            || (e.list.has_valid && (e.list.offset + n + 7) / 8 > e.list.valid.len)) {
            PyErr_SetString(PyExc_ValueError, "column headers: buffers too short");
            goto done;
        }
        if (col_parse(hk_t, &e.hkey, "header key") || col_parse(hv_t, &e.hvalue, "header value"))
            goto done;
        int32_t lo = col_off(&e.list, 0), hi = col_off(&e.list, n);
        for (int64_t k = 0; k < n; k++) {
            int32_t a = col_off(&e.list, k), b = col_off(&e.list, k + 1);
            if (a < 0 || b < a) {
                PyErr_SetString(PyExc_ValueError, "column headers: offsets out of order");
                goto done;
            }
        }
        if (lo < 0 || hi < lo) {
            PyErr_SetString(PyExc_ValueError, "column headers: offsets out of order");
            goto done;
        }
        /* entries [0, hi) of the header columns must be well-formed (checked from 0: offsets are absolute) */
        if (col_check_binary(&e.hkey, hi, "header key") || col_check_binary(&e.hvalue, hi, "header value"))
            goto done;
    }
    if (base_obj == Py_None) {
        e.base_ts = e.ts[0];
    } else {
        e.base_ts = PyLong_AsLongLong(base_obj);
        if (e.base_ts == -1 && PyErr_Occurred())
            goto done;
    }
    Py_buffer hdr = {0};
    int has_hdr = 0;
    if (header_obj != Py_None) {
        if (PyObject_GetBuffer(header_obj, &hdr, PyBUF_SIMPLE) < 0)
            goto done;
        has_hdr = 1;
        if (hdr.len != 61) {
            PyBuffer_Release(&hdr);
            PyErr_SetString(PyExc_ValueError, "header must be 61 bytes");
            goto done;
        }
    }
    e.body = PyMem_RawMalloc((size_t)n * sizeof(int32_t));
    if (!e.body) {
        if (has_hdr) PyBuffer_Release(&hdr);
        PyErr_NoMemory();
        goto done;
    }
    int64_t total;
    Py_BEGIN_ALLOW_THREADS
    total = enc_size(&e);
    Py_END_ALLOW_THREADS
    if (total < 0) {
        if (has_hdr) PyBuffer_Release(&hdr);
        PyErr_SetString(PyExc_ValueError, total == -1 ? "records too large for one record batch"
                                                      : "null header key (Kafka header keys are never null)");
        goto done;
    }
    int64_t prefix = has_hdr ? 61 : 0;
    uint8_t *o;
    out = new_buffer(prefix + total, 0, &o);
    if (!out) {
        if (has_hdr) PyBuffer_Release(&hdr);
        goto done;
    }
    if (has_hdr) {
        memcpy(o, hdr.buf, 61);
        PyBuffer_Release(&hdr);
        put_be32(o + 8, (uint32_t)(prefix + total - 12));
        if (base_obj == Py_None) {
            put_be64(o + 27, (uint64_t)e.base_ts);
            put_be64(o + 35, (uint64_t)e.max_ts);
        }
    }
    Py_BEGIN_ALLOW_THREADS
    enc_fill(&e, o + prefix);
    Py_END_ALLOW_THREADS
    if (has_hdr && crc_fn != Py_None) {
        PyObject *mv = PyMemoryView_FromMemory((char *)o + 21, (Py_ssize_t)(prefix + total - 21), PyBUF_READ);
        if (!mv) goto done;
        PyObject *crc = PyObject_CallOneArg(crc_fn, mv);
        Py_DECREF(mv);
        if (!crc) goto done;
        unsigned long v = PyLong_AsUnsignedLongMask(crc);
        Py_DECREF(crc);
        if (v == (unsigned long)-1 && PyErr_Occurred()) goto done;
        put_be32(o + 17, (uint32_t)v);
    }
    result = Py_BuildValue("(OLL)", out, (long long)e.ts[0], (long long)e.max_ts);
done:
    Py_XDECREF(out);
    PyMem_RawFree(e.body);
    col_release(&e.key);
    col_release(&e.value);
    col_release(&e.list);
    col_release(&e.hkey);
    col_release(&e.hvalue);
    if (has_ts) PyBuffer_Release(&ts_view);
    if (has_deltas) PyBuffer_Release(&deltas_view);
    return result;
}

/* ------------------------------------------------------------ frame bound ---- */

static inline uint32_t
le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint64_t
le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | ((uint64_t)le32(p + 4) << 32);
}

static inline uint32_t
be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

#define BOUND_LIMIT ((int64_t)1 << 62)
#define NEED(k) do { if (end - p < (int64_t)(k)) return -1; } while (0)
#define ADD(x) do { total += (int64_t)(x); if (total > limit) return total; } while (0)

/* lz4 frames: the content size when declared, else blocks x block maximum; -1 when malformed. */
static int64_t
lz4_bound(const uint8_t *p, const uint8_t *end, int64_t limit)
{
    static const int64_t block_max[8] = {0, 0, 0, 0, 64 << 10, 256 << 10, 1 << 20, 4 << 20};
    int64_t total = 0;
    if (p == end) return -1;
    while (p < end) {
        NEED(4);
        uint32_t magic = le32(p);
        p += 4;
        if ((magic & 0xFFFFFFF0u) == 0x184D2A50u) {  /* skippable frame */
            NEED(4);
            uint32_t size = le32(p);
            p += 4;
            NEED(size);
            p += size;
            continue;
        }
        if (magic != 0x184D2204u) return -1;
        NEED(2);
        uint8_t flg = p[0], bd = p[1];
        p += 2;
        if ((flg >> 6) != 1) return -1;
        int bchk = (flg >> 4) & 1, csize = (flg >> 3) & 1, cchk = (flg >> 2) & 1, dict = flg & 1;
        int64_t bmax = block_max[(bd >> 4) & 7];
        if (!bmax) return -1;
        int64_t declared = -1;
        if (csize) {
            NEED(8);
            uint64_t cs = le64(p);
            if (cs > (uint64_t)BOUND_LIMIT) return limit + 1;
            declared = (int64_t)cs;
            p += 8;
        }
        if (dict) { NEED(4); p += 4; }
        NEED(1);
        p += 1;  /* header checksum */
        int64_t frame = 0;
        for (;;) {
            NEED(4);
            uint32_t bs = le32(p);
            p += 4;
            if (bs == 0) break;
            uint32_t size = bs & 0x7FFFFFFFu;
            NEED(size);
            p += size;
            if (bchk) { NEED(4); p += 4; }
            frame += (bs & 0x80000000u) ? (int64_t)size : bmax;
            if (frame > limit) return limit + 1;
        }
        if (cchk) { NEED(4); p += 4; }
        ADD(declared >= 0 && declared < frame ? declared : frame);
    }
    return total;
}

/* zstd frames: the frame content size when declared, else the sum of block maxima (exact for raw and RLE). */
static int64_t
zstd_bound(const uint8_t *p, const uint8_t *end, int64_t limit)
{
    int64_t total = 0;
    if (p == end) return -1;
    while (p < end) {
        NEED(4);
        uint32_t magic = le32(p);
        p += 4;
        if ((magic & 0xFFFFFFF0u) == 0x184D2A50u) {
            NEED(4);
            uint32_t size = le32(p);
            p += 4;
            NEED(size);
            p += size;
            continue;
        }
        if (magic != 0xFD2FB528u) return -1;
        NEED(1);
        uint8_t fhd = *p++;
        int fcs_flag = fhd >> 6, single = (fhd >> 5) & 1, chk = (fhd >> 2) & 1, did = fhd & 3;
        if (fhd & 0x08) return -1;
        int64_t window = 0;
        if (!single) {
            NEED(1);
            uint8_t wd = *p++;
            int log = 10 + (wd >> 3);
            window = ((int64_t)1 << log) + (((int64_t)1 << log) / 8) * (wd & 7);
        }
        static const int did_size[4] = {0, 1, 2, 4};
        NEED(did_size[did]);
        p += did_size[did];
        int fcs_size = fcs_flag == 0 ? (single ? 1 : 0) : fcs_flag == 1 ? 2 : fcs_flag == 2 ? 4 : 8;
        int64_t declared = -1;
        if (fcs_size) {
            NEED(fcs_size);
            uint64_t v = fcs_size == 1 ? p[0] : fcs_size == 2 ? (uint64_t)(p[0] | (p[1] << 8)) + 256
                       : fcs_size == 4 ? le32(p) : le64(p);
            p += fcs_size;
            if (v > (uint64_t)BOUND_LIMIT) return limit + 1;
            declared = (int64_t)v;
            if (single) window = declared;
        }
        int64_t bmax = window < (128 << 10) ? window : (128 << 10);
        int64_t frame = 0;
        for (;;) {
            NEED(3);
            uint32_t bh = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16);
            p += 3;
            int last = bh & 1, type = (bh >> 1) & 3;
            uint32_t size = bh >> 3;
            if (type == 0) { NEED(size); p += size; frame += size; }
            else if (type == 1) { NEED(1); p += 1; frame += size; }
            else if (type == 2) { NEED(size); p += size; frame += bmax; }
            else return -1;
            if (frame > limit && declared < 0) return limit + 1;
            if (last) break;
        }
        if (chk) { NEED(4); p += 4; }
        ADD(declared >= 0 ? declared : frame);
    }
    return total;
}

/* xerial-framed snappy (16-byte header, then big-endian int32 block sizes): the sum of each raw block's
   declared length (its varint preamble, which the snappy decoder holds it to). */
static int64_t
xerial_bound(const uint8_t *p, const uint8_t *end, int64_t limit)
{
    int64_t total = 0;
    NEED(16);
    p += 16;
    if (p == end) return -1;
    while (p < end) {
        NEED(4);
        uint32_t size = be32(p);
        p += 4;
        if (size > INT32_MAX || size == 0) return -1;
        NEED(size);
        const uint8_t *q = p, *bend = p + size;
        uint64_t v = 0;
        for (int shift = 0;; shift += 7) {
            if (q >= bend || shift > 28) return -1;
            uint8_t b = *q++;
            v |= (uint64_t)(b & 0x7f) << shift;
            if (!(b & 0x80)) break;
        }
        p = bend;
        ADD(v);
    }
    return total;
}

PyDoc_STRVAR(frame_bound_doc,
"frame_bound(codec, data, limit) -> int\n\n"
"An upper bound of the decompressed size of lz4 frames (codec 3), zstd frames (4) or a xerial snappy\n"
"stream (2), computed from the frames' own structure without decompressing; a value > limit as soon as\n"
"it is known to exceed limit; -1 when the framing is malformed.");

static PyObject *
v2_frame_bound(PyObject *self, PyObject *args)
{
    int codec;
    Py_buffer view;
    long long limit;
    if (!PyArg_ParseTuple(args, "iy*L", &codec, &view, &limit))
        return NULL;
    const uint8_t *p = view.buf, *end = p + view.len;
    int64_t r = -1;
    Py_BEGIN_ALLOW_THREADS
    if (codec == 3) r = lz4_bound(p, end, limit);
    else if (codec == 4) r = zstd_bound(p, end, limit);
    else if (codec == 2) r = xerial_bound(p, end, limit);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromLongLong(r);
}

/* ----------------------------------------------------------------- module ---- */

static PyMethodDef methods[] = {
    {"decode", (PyCFunction)(void (*)(void))v2_decode, METH_VARARGS | METH_KEYWORDS, decode_doc},
    {"encode", v2_encode, METH_VARARGS, encode_doc},
    {"frame_bound", v2_frame_bound, METH_VARARGS, frame_bound_doc},
    {NULL, NULL, 0, NULL},
};

static int
exec_module(PyObject *m)
{
    CorruptError = PyErr_NewExceptionWithDoc("ember.record._v2codec.CorruptError",
                                             "A records section is structurally damaged.", PyExc_ValueError, NULL);
    if (!CorruptError || PyModule_AddObjectRef(m, "CorruptError", CorruptError) < 0)
        return -1;
    InvalidError = PyErr_NewExceptionWithDoc("ember.record._v2codec.InvalidError",
                                             "A records section is well-formed but not acceptable.",
                                             PyExc_ValueError, NULL);
    if (!InvalidError || PyModule_AddObjectRef(m, "InvalidError", InvalidError) < 0)
        return -1;
    return 0;
}

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ember.record._v2codec",
    "Kafka RecordBatch v2 records sections <-> Arrow column buffers (see ember.record.kafka_v2).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__v2codec(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m && exec_module(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
