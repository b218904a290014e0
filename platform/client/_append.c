/* ember.client._append: the producer's per-record path in C (Producer.send of bytes).
 *
 * Producer.send in Python costs about a microsecond per record (argument checks, the partition, the
 * accumulator's lock, four list appends, a future), twice what librdkafka's produce() costs. The common
 * call, send(topic, value[, key]) with bytes (a key: bytes or None) and nothing else, appending to the
 * partition's open batch, is done here in one call: a keyless record goes to the sticky partition, a
 * keyed one to Kafka's murmur2 partition. Every other case (headers, a partition, a timestamp, a value
 * serializer, a topic without metadata yet, a full batch, a full buffer, a closed producer) goes to the
 * Python send, which stays the reference behaviour.
 *
 * Three types:
 *   RecordFuture  the base of FutureRecordMetadata: (batch future, index, timestamp), allocated here
 *                 without running Python code;
 *   BatchRecords  the base of ProducerBatch: the open batch's record lists, size and count, read and
 *                 written here at fixed offsets (no attribute lookups);
 *   RecordAppender  owned by the RecordAccumulator: the bytes in use (buffer_memory's count, shared
 *                 with the Python side under the accumulator's lock) and, once configure_send() is
 *                 called, the fast send itself (tp_call / vectorcall).
 * The accumulator's lock (a threading.Lock) is taken around every change, as the Python side does, so
 * the sender thread sees a batch's lists, size and count change together.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <time.h>

/* ------------------------------------------------------------ RecordFuture ---- */

typedef struct {
    PyObject_HEAD
    PyObject *batch;          /* the batch's concurrent.futures.Future */
    Py_ssize_t index;         /* the record's index in its batch */
    long long timestamp;      /* the record's timestamp (ms) */
} RecordFuture;

static int
future_init(RecordFuture *self, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"batch", "index", "timestamp", NULL};
    PyObject *batch;
    Py_ssize_t index;
    long long timestamp;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OnL", names, &batch, &index, &timestamp))
        return -1;
    Py_INCREF(batch);
    Py_XSETREF(self->batch, batch);
    self->index = index;
    self->timestamp = timestamp;
    return 0;
}

static int
future_traverse(RecordFuture *self, visitproc visit, void *arg)
{
    Py_VISIT(self->batch);
    return 0;
}

static int
future_clear(RecordFuture *self)
{
    Py_CLEAR(self->batch);
    return 0;
}

/* A Python subclass's dealloc (subtype_dealloc) calls this, then drops its reference to the heap type
 * itself; and its traverse visits the type: neither is done here. */
static void
future_dealloc(RecordFuture *self)
{
    PyObject_GC_UnTrack(self);
    future_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef future_members[] = {
    {"_batch", T_OBJECT_EX, offsetof(RecordFuture, batch), READONLY, "the batch's future"},
    {"_index", T_PYSSIZET, offsetof(RecordFuture, index), READONLY, "the record's index in its batch"},
    {"_timestamp", T_LONGLONG, offsetof(RecordFuture, timestamp), READONLY, "the record's timestamp (ms)"},
    {NULL},
};

static PyTypeObject RecordFutureType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember.client._append.RecordFuture",
    .tp_basicsize = sizeof(RecordFuture),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A record's place in its batch: the base of FutureRecordMetadata.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)future_init,
    .tp_traverse = (traverseproc)future_traverse,
    .tp_clear = (inquiry)future_clear,
    .tp_dealloc = (destructor)future_dealloc,
    .tp_members = future_members,
};

/* ------------------------------------------------------------ BatchRecords ---- */

typedef struct {
    PyObject_HEAD
    PyObject *keys, *values, *timestamps, *headers;   /* lists, one item per record */
    PyObject *future;                                  /* the batch's Future */
    Py_ssize_t size;                                   /* estimated encoded bytes */
    Py_ssize_t count;                                  /* records */
} BatchRecords;

static int
batch_traverse(BatchRecords *self, visitproc visit, void *arg)
{
    Py_VISIT(self->keys);
    Py_VISIT(self->values);
    Py_VISIT(self->timestamps);
    Py_VISIT(self->headers);
    Py_VISIT(self->future);
    return 0;
}

static int
batch_clear(BatchRecords *self)
{
    Py_CLEAR(self->keys);
    Py_CLEAR(self->values);
    Py_CLEAR(self->timestamps);
    Py_CLEAR(self->headers);
    Py_CLEAR(self->future);
    return 0;
}

/* A Python subclass's dealloc (subtype_dealloc) calls this, then drops its reference to the heap type
 * itself; and its traverse visits the type: neither is done here. */
static void
batch_dealloc(BatchRecords *self)
{
    PyObject_GC_UnTrack(self);
    batch_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef batch_members[] = {
    {"keys", T_OBJECT_EX, offsetof(BatchRecords, keys), 0, "the records' keys"},
    {"values", T_OBJECT_EX, offsetof(BatchRecords, values), 0, "the records' values"},
    {"timestamps", T_OBJECT_EX, offsetof(BatchRecords, timestamps), 0, "the records' timestamps (ms)"},
    {"headers", T_OBJECT_EX, offsetof(BatchRecords, headers), 0, "the records' headers"},
    {"future", T_OBJECT_EX, offsetof(BatchRecords, future), 0, "the batch's future"},
    {"size", T_PYSSIZET, offsetof(BatchRecords, size), 0, "estimated encoded bytes"},
    {"count", T_PYSSIZET, offsetof(BatchRecords, count), 0, "records"},
    {NULL},
};

static PyTypeObject BatchRecordsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember.client._append.BatchRecords",
    .tp_basicsize = sizeof(BatchRecords),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "An open batch's records, size and count: the base of ProducerBatch.",
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)batch_traverse,
    .tp_clear = (inquiry)batch_clear,
    .tp_dealloc = (destructor)batch_dealloc,
    .tp_members = batch_members,
};

/* ---------------------------------------------------------- RecordAppender ---- */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *open;            /* dict TopicPartition -> ProducerBatch (RecordAccumulator._open) */
    PyObject *acquire;         /* the accumulator's lock's bound acquire and release */
    PyObject *release;
    PyTypeObject *future_type; /* FutureRecordMetadata */
    Py_ssize_t batch_size;
    long long buffer_memory;
    long long used;            /* bytes of queued records (buffer_memory's count), under the lock */
    int closed;
    /* configure_send: */
    PyObject *partitions;      /* dict topic -> list[TopicPartition] (Producer._partitions) */
    PyObject *sticky;          /* dict topic -> int (StickyPartitioner's current partition per topic) */
    PyObject *slow;            /* the Python send: every case not handled here */
    Py_ssize_t max_request_size;
    Py_ssize_t record_overhead, batch_overhead;
} RecordAppender;

static PyObject *str_value, *str_key;

static int
appender_init(RecordAppender *self, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"open", "lock", "batch_size", "buffer_memory", "future_type", NULL};
    PyObject *open, *lock, *future_type;
    Py_ssize_t batch_size;
    long long buffer_memory;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OnLO!", names, &PyDict_Type, &open, &lock, &batch_size,
                                     &buffer_memory, &PyType_Type, &future_type))
        return -1;
    if (!PyType_IsSubtype((PyTypeObject *)future_type, &RecordFutureType)) {
        PyErr_SetString(PyExc_TypeError, "future_type must subclass RecordFuture");
        return -1;
    }
    if (((PyTypeObject *)future_type)->tp_basicsize != RecordFutureType.tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "future_type must add no fields to RecordFuture (__slots__ = ())");
        return -1;
    }
    PyObject *acquire = PyObject_GetAttrString(lock, "acquire");
    if (acquire == NULL)
        return -1;
    PyObject *release = PyObject_GetAttrString(lock, "release");
    if (release == NULL) {
        Py_DECREF(acquire);
        return -1;
    }
    Py_INCREF(open);
    Py_XSETREF(self->open, open);
    Py_XSETREF(self->acquire, acquire);
    Py_XSETREF(self->release, release);
    Py_INCREF(future_type);
    Py_XSETREF(self->future_type, (PyTypeObject *)future_type);
    self->batch_size = batch_size;
    self->buffer_memory = buffer_memory;
    return 0;
}

static PyObject *
appender_configure_send(RecordAppender *self, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"partitions", "sticky", "max_request_size", "record_overhead", "batch_overhead",
                            "slow", NULL};
    PyObject *partitions, *sticky, *slow;
    Py_ssize_t max_request_size, record_overhead, batch_overhead;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!nnnO", names, &PyDict_Type, &partitions, &PyDict_Type, &sticky,
                                     &max_request_size, &record_overhead, &batch_overhead, &slow))
        return NULL;
    if (!PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "slow must be callable");
        return NULL;
    }
    Py_INCREF(partitions);
    Py_XSETREF(self->partitions, partitions);
    Py_INCREF(sticky);
    Py_XSETREF(self->sticky, sticky);
    Py_INCREF(slow);
    Py_XSETREF(self->slow, slow);
    self->max_request_size = max_request_size;
    self->record_overhead = record_overhead;
    self->batch_overhead = batch_overhead;
    Py_RETURN_NONE;
}

static PyObject *
appender_close(RecordAppender *self, PyObject *Py_UNUSED(ignored))
{
    self->closed = 1;
    Py_RETURN_NONE;
}

static inline PyObject *
slow_send(RecordAppender *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (self->slow == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "RecordAppender: configure_send() was not called");
        return NULL;
    }
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

/* Kafka's Utils.murmur2 (seed 0x9747b28c), unsigned; ember.client.partitioner.murmur2 is module_murmur2. */
static uint32_t
murmur2(const unsigned char *data, Py_ssize_t length)
{
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t words = length / 4;
    for (Py_ssize_t i = 0; i < words; i++) {
        const unsigned char *w = data + 4 * i;
        uint32_t k = (uint32_t)w[0] | ((uint32_t)w[1] << 8) | ((uint32_t)w[2] << 16) | ((uint32_t)w[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    const unsigned char *tail = data + (length & ~(Py_ssize_t)3);
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        h ^= tail[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

static inline int
call_lock(PyObject *method)
{
    PyObject *r = PyObject_CallNoArgs(method);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* send(topic, value, key): Py_None when the fast path does not apply (key: Py_None or bytes). */
static PyObject *
fast_append(RecordAppender *self, PyObject *topic, PyObject *value, PyObject *key)
{
    if (self->closed || self->partitions == NULL || self->open == NULL || self->acquire == NULL
        || self->release == NULL || self->future_type == NULL      /* configured, and __init__ ran */
        || !PyUnicode_CheckExact(topic) || !PyBytes_CheckExact(value) || (key != Py_None && !PyBytes_CheckExact(key)))
        return Py_None;
    PyObject *tps = PyDict_GetItemWithError(self->partitions, topic);
    if (tps == NULL)
        return PyErr_Occurred() ? NULL : Py_None;
    if (!PyList_CheckExact(tps) || PyList_GET_SIZE(tps) == 0)
        return Py_None;
    Py_ssize_t partition, size = self->record_overhead + PyBytes_GET_SIZE(value);
    if (key != Py_None) {
        uint32_t hash = murmur2((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
        partition = (Py_ssize_t)((hash & 0x7fffffffu) % (uint32_t)PyList_GET_SIZE(tps));
        size += PyBytes_GET_SIZE(key);
    } else {
        PyObject *current = PyDict_GetItemWithError(self->sticky, topic);
        if (current == NULL)
            return PyErr_Occurred() ? NULL : Py_None;
        partition = PyLong_AsSsize_t(current);
        if (partition == -1 && PyErr_Occurred())
            return NULL;
        if (partition < 0 || partition >= PyList_GET_SIZE(tps))
            return Py_None;
    }
    PyObject *tp = PyList_GET_ITEM(tps, partition);
    if (size + self->batch_overhead > self->max_request_size)
        return Py_None;      /* the Python send raises MessageTooLarge */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long timestamp = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    PyObject *stamp = PyLong_FromLongLong(timestamp);
    if (stamp == NULL)
        return NULL;
    /* Strong references to what is used across the lock's acquire, which lets other threads run (they may
     * drop tps, or re-run __init__), and across tp_alloc, which may run the collector and finalizers. */
    PyObject *acquire = Py_NewRef(self->acquire), *release = Py_NewRef(self->release);
    Py_INCREF(tp);
    if (call_lock(acquire) < 0) {
        Py_DECREF(acquire);
        Py_DECREF(release);
        Py_DECREF(tp);
        Py_DECREF(stamp);
        return NULL;
    }
    PyObject *result = Py_None;
    PyObject *batch = self->closed ? NULL : Py_XNewRef(PyDict_GetItemWithError(self->open, tp));
    if (batch == NULL) {
        if (PyErr_Occurred())
            result = NULL;
        goto unlock;
    }
    if (!PyObject_TypeCheck(batch, &BatchRecordsType))
        goto unlock;
    BatchRecords *b = (BatchRecords *)batch;
    if ((b->size + size > self->batch_size && b->count) || (self->used + size > self->buffer_memory && self->used))
        goto unlock;          /* a new batch, or a wait for buffer memory: the Python path */
    /* the fields are writable from Python: only lists (as ProducerBatch sets them) are appended to here */
    if (b->keys == NULL || b->values == NULL || b->timestamps == NULL || b->headers == NULL || b->future == NULL
        || !PyList_CheckExact(b->keys) || !PyList_CheckExact(b->values) || !PyList_CheckExact(b->timestamps)
        || !PyList_CheckExact(b->headers))
        goto unlock;
    RecordFuture *future = (RecordFuture *)self->future_type->tp_alloc(self->future_type, 0);
    if (future == NULL) {
        result = NULL;
        goto unlock;
    }
    /* appending to a list only fails without memory; undo the ones done so the lists stay aligned */
    PyObject *lists[4] = {b->keys, b->values, b->timestamps, b->headers};
    PyObject *items[4] = {key, value, stamp, Py_None};
    for (int i = 0; i < 4; i++) {
        if (PyList_Append(lists[i], items[i]) < 0) {
            while (i-- > 0)
                PyList_SetSlice(lists[i], PyList_GET_SIZE(lists[i]) - 1, PyList_GET_SIZE(lists[i]), NULL);
            Py_DECREF(future);
            result = NULL;
            goto unlock;
        }
    }
    self->used += size;
    b->size += size;
    b->count += 1;
    Py_INCREF(b->future);
    future->batch = b->future;
    future->index = b->count - 1;
    future->timestamp = timestamp;
    result = (PyObject *)future;
unlock:
    Py_XDECREF(batch);
    Py_DECREF(tp);
    Py_DECREF(stamp);
    Py_DECREF(acquire);
    {
        /* an error raised under the lock stays the error: release() must not run with it pending */
        PyObject *type, *error, *traceback;
        PyErr_Fetch(&type, &error, &traceback);
        int released = call_lock(release);
        Py_DECREF(release);
        if (released < 0) {          /* cannot happen with a held threading.Lock; fail loudly if it does */
            Py_XDECREF(type);
            Py_XDECREF(error);
            Py_XDECREF(traceback);
            if (result != NULL && result != Py_None)
                Py_DECREF(result);
            return NULL;
        }
        PyErr_Restore(type, error, traceback);
    }
    return result;
}

static PyObject *
appender_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    RecordAppender *self = (RecordAppender *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *topic = NULL, *value = NULL, *key = NULL;
    if (nargs > 3)
        return slow_send(self, args, nargsf, kwnames);
    if (nargs >= 1)
        topic = args[0];
    if (nargs >= 2)
        value = args[1];
    if (nargs >= 3)
        key = args[2];
    if (kwnames != NULL) {
        /* value= and key= are taken here (kafka-python's callers name them); anything else is not */
        Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t i = 0; i < nkw; i++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, i), *arg = args[nargs + i];
            if (value == NULL && PyUnicode_Compare(name, str_value) == 0)
                value = arg;
            else if (key == NULL && PyUnicode_Compare(name, str_key) == 0)
                key = arg;
            else
                return slow_send(self, args, nargsf, kwnames);
        }
    }
    if (topic == NULL || value == NULL)
        return slow_send(self, args, nargsf, kwnames);
    PyObject *result = fast_append(self, topic, value, key == NULL ? Py_None : key);
    if (result == Py_None)
        return slow_send(self, args, nargsf, kwnames);
    return result;
}

static PyObject *
appender_get_used(RecordAppender *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(self->used);
}

static int
appender_set_used(RecordAppender *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "used cannot be deleted");
        return -1;
    }
    long long used = PyLong_AsLongLong(value);
    if (used == -1 && PyErr_Occurred())
        return -1;
    self->used = used;
    return 0;
}

static int
appender_traverse(RecordAppender *self, visitproc visit, void *arg)
{
    Py_VISIT(self->open);
    Py_VISIT(self->acquire);
    Py_VISIT(self->release);
    Py_VISIT(self->future_type);
    Py_VISIT(self->partitions);
    Py_VISIT(self->sticky);
    Py_VISIT(self->slow);
    return 0;
}

static int
appender_clear(RecordAppender *self)
{
    Py_CLEAR(self->partitions);     /* first: without it, a call during the teardown takes the Python path */
    Py_CLEAR(self->sticky);
    Py_CLEAR(self->open);
    Py_CLEAR(self->acquire);
    Py_CLEAR(self->release);
    Py_CLEAR(self->future_type);
    Py_CLEAR(self->slow);
    return 0;
}

static void
appender_dealloc(RecordAppender *self)
{
    PyObject_GC_UnTrack(self);
    appender_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
appender_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    RecordAppender *self = (RecordAppender *)PyType_GenericNew(type, args, kwds);
    if (self != NULL)
        self->vectorcall = appender_vectorcall;
    return (PyObject *)self;
}

static PyGetSetDef appender_getset[] = {
    {"used", (getter)appender_get_used, (setter)appender_set_used,
     "bytes of queued records (buffer_memory's count); read and written under the accumulator's lock", NULL},
    {NULL},
};

static PyMemberDef appender_members[] = {
    {"closed", T_INT, offsetof(RecordAppender, closed), READONLY, "whether close() was called"},
    {NULL},
};

static PyMethodDef appender_methods[] = {
    {"configure_send", (PyCFunction)(void (*)(void))appender_configure_send, METH_VARARGS | METH_KEYWORDS,
     "configure_send(partitions, sticky, max_request_size, record_overhead, batch_overhead, slow): make "
     "calling this object Producer.send"},
    {"close", (PyCFunction)appender_close, METH_NOARGS, "send every later call to the Python send"},
    {NULL},
};

static PyTypeObject RecordAppenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember.client._append.RecordAppender",
    .tp_basicsize = sizeof(RecordAppender),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "The accumulator's bytes in use, and Producer.send's path for a keyless bytes value.",
    .tp_new = appender_new,
    .tp_init = (initproc)appender_init,
    .tp_traverse = (traverseproc)appender_traverse,
    .tp_clear = (inquiry)appender_clear,
    .tp_dealloc = (destructor)appender_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(RecordAppender, vectorcall),
    .tp_getset = appender_getset,
    .tp_members = appender_members,
    .tp_methods = appender_methods,
};

/* ------------------------------------------------------------------ module ---- */

static PyObject *
module_murmur2(PyObject *Py_UNUSED(module), PyObject *arg)
{
    Py_buffer data;
    if (PyObject_GetBuffer(arg, &data, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t hash = murmur2((const unsigned char *)data.buf, data.len);
    PyBuffer_Release(&data);
    return PyLong_FromLong((long)(int32_t)hash);
}

static PyMethodDef module_methods[] = {
    {"murmur2", module_murmur2, METH_O, "murmur2(data): Kafka's Utils.murmur2 of a bytes-like object, a signed 32-bit int"},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ember.client._append",
    "The producer's per-record path in C (see platform/client/_append.c).", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__append(void)
{
    if (PyType_Ready(&RecordFutureType) < 0 || PyType_Ready(&BatchRecordsType) < 0 ||
        PyType_Ready(&RecordAppenderType) < 0)
        return NULL;
    str_value = PyUnicode_InternFromString("value");
    str_key = PyUnicode_InternFromString("key");
    if (str_value == NULL || str_key == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "RecordFuture", (PyObject *)&RecordFutureType) < 0 ||
        PyModule_AddObjectRef(m, "BatchRecords", (PyObject *)&BatchRecordsType) < 0 ||
        PyModule_AddObjectRef(m, "RecordAppender", (PyObject *)&RecordAppenderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
