/* The Kafka front's hot loop in C: a stored batch's records as the records
 * of a Kafka RecordBatch (v2), read straight from the batch's blob.
 *
 * ``_records.encode_columns`` does the same in Python, a record at a time,
 * from per-record bytes objects that the packed batch is first cut into
 * (``batch.slices``); for 100 B records those two were half of what the
 * front spent on a fetch (bench/pyspy.py kafka-consume).  Here there is no
 * per-record Python object: keys and values are copied from the blob into
 * the answer, the varints written as they go.
 *
 * Only the common shapes are taken: every record's extras absent or a
 * create time with no headers (what a Kafka producer without headers
 * writes).  Anything else returns None and the caller encodes in Python,
 * which stays the reference (tests/unit/test_kafka_fastrecords.py checks
 * the two agree byte for byte).
 *
 * The layout read here is ``batch._packed``'s: a blob of every key, then
 * every payload, then every record's extras, each ``lens[i]`` bytes long
 * (-1: none); ``lens`` has the key lengths, then the payload lengths, then
 * (with extras) the extras lengths, ``count`` of each.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* The extras of a record with a create time and no headers:
 * flag 1, the time (u64 little-endian), zero headers (u16). */
#define CREATE_TIME_EXTRA 11

static int zigzag_len(int64_t n) {
    uint64_t z = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    int len = 1;
    while (z >= 0x80) {
        z >>= 7;
        len++;
    }
    return len;
}

static char *put_zigzag(char *out, int64_t n) {
    uint64_t z = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    while (z >= 0x80) {
        *out++ = (char)((z & 0x7f) | 0x80);
        z >>= 7;
    }
    *out++ = (char)z;
    return out;
}

static int64_t u64_le(const unsigned char *p) {
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--) v = (v << 8) | p[k];
    return (int64_t)v;
}

/* kafka_records(blob, starts, lens, count, first, n, offsets, o0, timestamps, t0, extras)
 *
 * Records first .. first + n - 1 of a packed batch of ``count`` records.
 * ``lens``: the batch's lengths table (int32, -1: none), ``starts``: where
 * each of those pieces starts in ``blob`` (int64, the same order); their
 * offsets are offsets[o0:o0 + n] and their log timestamps
 * timestamps[t0:t0 + n].  ``extras``: whether the batch has extras (then
 * the tables have 3 * count entries, else 2 * count).
 *
 * Returns (records bytes, first timestamp, max timestamp) or None (a shape
 * this does not take: the caller encodes in Python).  Raises ValueError
 * when the tables do not fit the blob (a batch that was checked cannot). */
static PyObject *kafka_records(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer blob, starts_buf, lens_buf;
    Py_ssize_t count, first, n, o0, t0;
    PyObject *offsets, *timestamps;
    int has_extras;
    if (!PyArg_ParseTuple(args, "y*y*y*nnnO!nO!np", &blob, &starts_buf, &lens_buf, &count,
                          &first, &n, &PyList_Type, &offsets, &o0, &PyList_Type, &timestamps,
                          &t0, &has_extras))
        return NULL;
    PyObject *result = NULL;
    int64_t *ts = NULL;
    const unsigned char *buf = blob.buf;
    const int64_t *starts = starts_buf.buf;
    const int32_t *lens = lens_buf.buf;
    Py_ssize_t columns = has_extras ? 3 : 2;
    /* (Each bound is checked so that no sum or product below overflows.) */
    if (n <= 0 || first < 0 || count < 0 || count > PY_SSIZE_T_MAX / 24 || first > count ||
        n > count - first ||
        starts_buf.len != (Py_ssize_t)sizeof(int64_t) * columns * count ||
        lens_buf.len != (Py_ssize_t)sizeof(int32_t) * columns * count || o0 < 0 ||
        o0 > PyList_GET_SIZE(offsets) - n || t0 < 0 || t0 > PyList_GET_SIZE(timestamps) - n) {
        PyErr_SetString(PyExc_ValueError, "kafka_records: arguments out of range");
        goto done;
    }
    /* Every piece taken lies inside the blob. */
    for (int c = 0; c < columns; c++) {
        for (Py_ssize_t i = first; i < first + n; i++) {
            int64_t at = starts[c * count + i];
            int32_t len = lens[c * count + i];
            if (len < -1) {
                PyErr_SetString(PyExc_ValueError, "kafka_records: a bad length");
                goto done;
            }
            if (at < 0 || at > blob.len || (len > 0 && len > blob.len - at)) {
                PyErr_SetString(PyExc_ValueError, "kafka_records: a piece past the blob");
                goto done;
            }
        }
    }
    ts = PyMem_Malloc(sizeof(int64_t) * (size_t)n);
    if (ts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* The time each record shows a consumer: its create time, else the log's. */
    int64_t first_ts = INT64_MAX, max_ts = INT64_MIN;
    for (Py_ssize_t r = 0; r < n; r++) {
        long long t = PyLong_AsLongLong(PyList_GET_ITEM(timestamps, t0 + r));
        if (t == -1 && PyErr_Occurred()) goto done;
        if (has_extras) {
            Py_ssize_t i = 2 * count + first + r;
            if (lens[i] == CREATE_TIME_EXTRA) {
                const unsigned char *x = buf + starts[i];
                if (x[0] != 1 || x[9] != 0 || x[10] != 0) goto fallback;
                t = u64_le(x + 1);
            } else if (lens[i] != -1) {
                goto fallback; /* headers, or extras of another shape */
            }
        }
        ts[r] = t;
        if (t < first_ts) first_ts = t;
        if (t > max_ts) max_ts = t;
    }
    long long base = PyLong_AsLongLong(PyList_GET_ITEM(offsets, o0));
    if (base == -1 && PyErr_Occurred()) goto done;
    /* Pass 1: the size of the records.  Pass 2: write them. */
    Py_ssize_t total = 0;
    char *out = NULL;
    for (int pass = 1; pass <= 2; pass++) {
        if (pass == 2) {
            result = PyBytes_FromStringAndSize(NULL, total);
            if (result == NULL) goto done;
            out = PyBytes_AS_STRING(result);
        }
        for (Py_ssize_t r = 0; r < n; r++) {
            long long off = PyLong_AsLongLong(PyList_GET_ITEM(offsets, o0 + r));
            if (off == -1 && PyErr_Occurred()) goto done;
            int32_t klen = lens[first + r], vlen = lens[count + first + r];
            Py_ssize_t body = 1 + zigzag_len(ts[r] - first_ts) + zigzag_len(off - base) +
                              zigzag_len(klen) + zigzag_len(vlen) + 1 + (klen > 0 ? klen : 0) +
                              (vlen > 0 ? vlen : 0);
            if (pass == 1) {
                total += zigzag_len(body) + body;
                continue;
            }
            out = put_zigzag(out, body);
            *out++ = 0; /* attributes */
            out = put_zigzag(out, ts[r] - first_ts);
            out = put_zigzag(out, off - base);
            out = put_zigzag(out, klen);
            if (klen > 0) {
                memcpy(out, buf + starts[first + r], (size_t)klen);
                out += klen;
            }
            out = put_zigzag(out, vlen);
            if (vlen > 0) {
                memcpy(out, buf + starts[count + first + r], (size_t)vlen);
                out += vlen;
            }
            *out++ = 0; /* no headers */
        }
    }
    {
        PyObject *tuple = Py_BuildValue("(OLL)", result, (long long)first_ts, (long long)max_ts);
        Py_DECREF(result);
        result = tuple;
    }
    goto done;
fallback:
    Py_INCREF(Py_None);
    result = Py_None;
done:
    if (PyErr_Occurred()) Py_CLEAR(result); /* nothing half-made is returned */
    PyMem_Free(ts);
    PyBuffer_Release(&blob);
    PyBuffer_Release(&starts_buf);
    PyBuffer_Release(&lens_buf);
    return result;
}

static PyMethodDef methods[] = {
    {"kafka_records", kafka_records, METH_VARARGS,
     "A packed batch's records as Kafka records (see the module's comment)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastrecords",
    "The Kafka front's record encoding in C (pure-Python twin: _records.encode_columns).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastrecords(void) { return PyModule_Create(&module); }
