/* A scanned batch body written as commitlog records, compiled: the same results as
 * nodes/store/record_batch.py's encode_scanned_python, which stays the reference. (The scan
 * itself reads the producer's batch-body format, which nodes/store/_batch_body.c owns.)
 *
 * A master taking a send_batch of 1024 x 1 KiB spends about a third of its main thread in the
 * Python loop: a header packed, a tail joined and a CRC text formatted per record, every body
 * hashed twice (once for BODYCRC, once more inside the record CRC chain), then every part
 * joined. Here the output is allocated once at its final size and written in place, and each
 * body is hashed once: the record CRC (of header, body and tail) is combined from the
 * header's CRC and the body's with zlib's crc32_combine.
 *
 * The Python wrapper (record_batch.encode_scanned) checks the topic, the IPv6 flags and the
 * hosts and raises its ValueErrors; this file takes the values already packed where packing
 * can fail (the topic part, the 4-byte IPs). A field out of its range, or not an integer,
 * raises the error HEADER.pack raises (struct.error, handed over by init()); an argument of the
 * wrong shape raises TypeError; an entry that points outside the blob raises ValueError (the
 * Python loop would slice it short and write a wrong record). The record layout
 * (nodes.store.record.HEADER and its tail) is checked once by init(): a layout this file does
 * not know makes init raise, and record_batch then keeps the Python loops.
 *
 * place_batch writes each record's PHYSICALOFFSET once the commitlog knows where the batch
 * goes (record_batch.place_batch_python: ~0.4 us a record in Python, struct.pack_into and a
 * list append each). Stricter than the Python loop, which struct.pack_into lets write any
 * field that fits the blob: every size must hold a PHYSICALOFFSET field and the sizes must
 * stay within the blob, else ValueError and nothing written; a position the field cannot
 * hold raises struct.error, as in Python.
 *
 * Python API (called by nodes.store.record_batch only):
 *   init(header_format, header_bytes, topic_len_format, props_len_format, record_magic,
 *        record_crc_prefix, record_crc_property_bytes, range_error)
 *   encode_scanned(blob, entries, topic_part, queue_id, first_queue_offset, store_timestamp_ms,
 *                  born_timestamp_ms, born_ip, born_port, store_ip, store_port, sys_flag,
 *                  reconsume_times) -> (bytearray, list[int])
 *   place_batch(blob, sizes, phys_offset) -> list[int]
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../common/_byte_order.h"
#include "../common/_record_layout.h"

#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define TOPIC_LEN_FORMAT ">B"
#define RECORD_CRC_VALUE_BYTES 9 /* 8 upper-case hex digits, then the pair separator \x02 */
#define RECORD_CRC_PREFIX_MAX 64
#define ENTRY_FIELDS 6 /* a ScannedBatch entry: body start, body length, flag, props start, props length, tag code */

static uint32_t g_record_magic;
static unsigned char g_record_crc_prefix[RECORD_CRC_PREFIX_MAX];
static Py_ssize_t g_record_crc_prefix_len;
static PyObject *g_range_error; /* struct.error: what HEADER.pack raises for a field it cannot pack */
static int g_ready; /* init() has set every g_ value above */

/* One entry of a scanned batch, checked against the blob. */
typedef struct {
    Py_ssize_t body_start, body_len, props_start, props_len;
    int32_t flag;
    int32_t total_size; /* of the record it becomes */
} entry_t;

/* An integer field for the header: any object with __index__, as struct takes it, within
 * lo..hi; otherwise the error HEADER.pack would raise. Runs Python code (__index__), so it is
 * called before anything of the batch is read. */
static int
field_value(PyObject *obj, long long lo, long long hi, const char *what, long long *out)
{
    if (!PyIndex_Check(obj)) {
        PyErr_Format(g_range_error, "%s must be an integer, not %.100s", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyObject *index = PyNumber_Index(obj);
    if (index == NULL) {
        return -1;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(index, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        Py_DECREF(index);
        return -1;
    }
    if (overflow || v < lo || v > hi) {
        PyErr_Format(g_range_error, "%s %S is out of range %lld..%lld", what, index, lo, hi);
        Py_DECREF(index);
        return -1;
    }
    Py_DECREF(index);
    *out = v;
    return 0;
}

/* An element of an entry tuple: a Python int (no __index__: nothing may run while the
 * entries are read), within lo..hi. */
static int
entry_value(PyObject *obj, Py_ssize_t i, const char *what, long long lo, long long hi, PyObject *out_of_range,
            long long *out)
{
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "entry %zd: %s must be an int, not %.100s", i, what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow || v < lo || v > hi) {
        Py_INCREF(obj); /* formatting it may run an int subclass's __repr__, which could drop the entry */
        PyErr_Format(out_of_range, "entry %zd: %s %R is out of range %lld..%lld", i, what, obj, lo, hi);
        Py_DECREF(obj);
        return -1;
    }
    *out = v;
    return 0;
}

/* The 4 packed bytes of an IPv4 host. */
static const unsigned char *
ip_bytes(PyObject *obj, const char *what)
{
    if (!PyBytes_Check(obj) || PyBytes_GET_SIZE(obj) != IP_BYTES) {
        PyErr_Format(PyExc_ValueError, "%s must be %d packed bytes (an IPv4 address)", what, IP_BYTES);
        return NULL;
    }
    return (const unsigned char *)PyBytes_AS_STRING(obj);
}

/* Every entry checked and copied out of the list, before anything is allocated (an
 * allocation may run a collection, and a finalizer could change the list). Returns 0, or -1
 * with an exception set. */
static int
read_entries(PyObject *entries, Py_ssize_t blob_len, Py_ssize_t fixed_bytes, Py_ssize_t crc_property_bytes,
             entry_t *out, Py_ssize_t n, Py_ssize_t *records_bytes)
{
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PySequence_Fast_GET_ITEM(entries, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != ENTRY_FIELDS) {
            PyErr_Format(PyExc_TypeError, "entry %zd must be a tuple of %d ints (body start, body length, flag, "
                         "properties start, properties length, tag code)", i, ENTRY_FIELDS);
            return -1;
        }
        long long body_start, body_len, flag, props_start, props_len;
        if (entry_value(PyTuple_GET_ITEM(entry, 0), i, "body start", 0, blob_len, PyExc_ValueError, &body_start) < 0
            || entry_value(PyTuple_GET_ITEM(entry, 1), i, "body length", 0, blob_len - body_start, PyExc_ValueError,
                           &body_len) < 0
            || entry_value(PyTuple_GET_ITEM(entry, 2), i, "flag", INT32_MIN, INT32_MAX, g_range_error, &flag) < 0
            || entry_value(PyTuple_GET_ITEM(entry, 3), i, "properties start", 0, blob_len, PyExc_ValueError,
                           &props_start) < 0
            || entry_value(PyTuple_GET_ITEM(entry, 4), i, "properties length", 0, blob_len - props_start,
                           PyExc_ValueError, &props_len) < 0) {
            return -1;
        }
        /* the tag code (element 5) is the dispatch's business, not the record's */
        if (props_len + crc_property_bytes > PROPS_LEN_MAX) {
            PyErr_Format(g_range_error, "entry %zd: %lld property bytes do not fit the record's 2-byte length", i,
                         props_len);
            return -1;
        }
        long long size = (long long)fixed_bytes + body_len + props_len; /* each term < 2**62: no overflow */
        if (size > INT32_MAX) {
            PyErr_Format(g_range_error, "entry %zd: a record of %lld bytes does not fit its 4-byte size", i, size);
            return -1;
        }
        if (total > PY_SSIZE_T_MAX - (Py_ssize_t)size) {
            PyErr_SetString(PyExc_OverflowError, "the records of the batch do not fit in memory");
            return -1;
        }
        total += (Py_ssize_t)size;
        out[i] = (entry_t){(Py_ssize_t)body_start, (Py_ssize_t)body_len, (Py_ssize_t)props_start,
                           (Py_ssize_t)props_len, (int32_t)flag, (int32_t)size};
    }
    *records_bytes = total;
    return 0;
}

#define ENCODE_ARGS 13

static PyObject *
encode_scanned(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (!g_ready) {
        PyErr_SetString(PyExc_RuntimeError, "_record_encode.init() has not completed");
        return NULL;
    }
    if (nargs != ENCODE_ARGS) {
        PyErr_Format(PyExc_TypeError,
                     "encode_scanned(blob, entries, topic_part, queue_id, first_queue_offset, store_timestamp_ms, "
                     "born_timestamp_ms, born_ip, born_port, store_ip, store_port, sys_flag, reconsume_times): "
                     "%zd arguments given, %d expected", nargs, ENCODE_ARGS);
        return NULL;
    }
    PyObject *entries = args[1], *topic_part = args[2];
    if (!PyList_Check(entries) && !PyTuple_Check(entries)) {
        PyErr_Format(PyExc_TypeError, "entries must be a list or tuple, not %.100s", Py_TYPE(entries)->tp_name);
        return NULL;
    }
    /* topic_part = TOPIC_LEN.pack(len(topic)) + topic */
    if (!PyBytes_Check(topic_part) || PyBytes_GET_SIZE(topic_part) < 2
        || (unsigned char)PyBytes_AS_STRING(topic_part)[0] != PyBytes_GET_SIZE(topic_part) - 1) {
        PyErr_SetString(PyExc_ValueError, "topic_part must be bytes: a length byte, then that many topic bytes (1+)");
        return NULL;
    }
    const unsigned char *born_ip = ip_bytes(args[7], "born_ip");
    const unsigned char *store_ip = born_ip == NULL ? NULL : ip_bytes(args[9], "store_ip");
    if (store_ip == NULL) {
        return NULL;
    }
    /* The scalar fields first: __index__ may run Python code, which must not happen once the
     * entries are being read. */
    long long queue_id, first_queue_offset, store_ts, born_ts, born_port, store_port, sys_flag, reconsume_times;
    if (field_value(args[3], INT32_MIN, INT32_MAX, "queue_id", &queue_id) < 0
        || field_value(args[4], INT64_MIN, INT64_MAX, "first_queue_offset", &first_queue_offset) < 0
        || field_value(args[5], INT64_MIN, INT64_MAX, "store_timestamp_ms", &store_ts) < 0
        || field_value(args[6], INT64_MIN, INT64_MAX, "born_timestamp_ms", &born_ts) < 0
        || field_value(args[8], INT32_MIN, INT32_MAX, "born_port", &born_port) < 0
        || field_value(args[10], INT32_MIN, INT32_MAX, "store_port", &store_port) < 0
        || field_value(args[11], INT32_MIN, INT32_MAX, "sys_flag", &sys_flag) < 0
        || field_value(args[12], INT32_MIN, INT32_MAX, "reconsume_times", &reconsume_times) < 0) {
        return NULL;
    }

    /* What init() set, copied: an allocation below may run a finalizer that calls init() again. */
    const uint32_t magic = g_record_magic;
    unsigned char crc_prefix[RECORD_CRC_PREFIX_MAX];
    const Py_ssize_t crc_prefix_len = g_record_crc_prefix_len;
    memcpy(crc_prefix, g_record_crc_prefix, (size_t)crc_prefix_len);

    Py_buffer blob;
    if (PyObject_GetBuffer(args[0], &blob, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    /* Own the list: __index__ above may have dropped every other reference to it. */
    Py_INCREF(entries);
    PyObject *out = NULL, *sizes = NULL, *result = NULL;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(entries);
    entry_t *batch = PyMem_New(entry_t, n > 0 ? n : 1);
    if (batch == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (n > 0 && first_queue_offset > INT64_MAX - (n - 1)) {
        PyErr_Format(g_range_error, "queue offsets %lld.. of %zd records pass the 8-byte field", first_queue_offset, n);
        goto done;
    }
    const Py_ssize_t topic_part_len = PyBytes_GET_SIZE(topic_part);
    const Py_ssize_t crc_property_bytes = crc_prefix_len + RECORD_CRC_VALUE_BYTES;
    const Py_ssize_t fixed_bytes = HEADER_BYTES + topic_part_len + PROPS_LEN_BYTES + crc_property_bytes;
    Py_ssize_t records_bytes;
    if (read_entries(entries, blob.len, fixed_bytes, crc_property_bytes, batch, n, &records_bytes) < 0) {
        goto done;
    }
    out = PyByteArray_FromStringAndSize(NULL, records_bytes);
    sizes = out == NULL ? NULL : PyList_New(n);
    if (sizes == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *size = PyLong_FromLong(batch[i].total_size);
        if (size == NULL) {
            goto done;
        }
        PyList_SET_ITEM(sizes, i, size);
    }

    /* Nothing below runs Python code or fails: every record is written in place. */
    const unsigned char *src = (const unsigned char *)blob.buf;
    const unsigned char *topic = (const unsigned char *)PyBytes_AS_STRING(topic_part);
    unsigned char *rec = (unsigned char *)PyByteArray_AS_STRING(out);
#if ZLIB_VERNUM >= 0x12c0
    /* The combine operator depends on the body length only, and a batch's bodies are often of
     * one length: generated once per run of equal lengths. */
    Py_ssize_t op_body_len = -1;
    uLong combine_op = 0;
#endif
    for (Py_ssize_t i = 0; i < n; i++) {
        const entry_t *e = &batch[i];
        const unsigned char *body = src + e->body_start;
        const uLong body_crc = crc32(0L, body, (uInt)e->body_len);
        put_be32(rec + POS_TOTAL_SIZE, (uint32_t)e->total_size);
        put_be32(rec + POS_MAGIC, magic);
        put_be32(rec + POS_BODY_CRC, (uint32_t)body_crc);
        put_be32(rec + POS_QUEUE_ID, (uint32_t)queue_id);
        put_be32(rec + POS_FLAG, (uint32_t)e->flag);
        put_be64(rec + POS_QUEUE_OFFSET, (uint64_t)(first_queue_offset + i));
        put_be64(rec + POS_PHYS_OFFSET, 0);
        put_be32(rec + POS_SYS_FLAG, (uint32_t)sys_flag);
        put_be64(rec + POS_BORN_TIMESTAMP, (uint64_t)born_ts);
        memcpy(rec + POS_BORN_IP, born_ip, IP_BYTES);
        put_be32(rec + POS_BORN_PORT, (uint32_t)born_port);
        put_be64(rec + POS_STORE_TIMESTAMP, (uint64_t)store_ts);
        memcpy(rec + POS_STORE_IP, store_ip, IP_BYTES);
        put_be32(rec + POS_STORE_PORT, (uint32_t)store_port);
        put_be32(rec + POS_RECONSUME_TIMES, (uint32_t)reconsume_times);
        put_be64(rec + POS_PREPARED_TX_OFFSET, 0);
        put_be32(rec + POS_BODY_LEN, (uint32_t)e->body_len);
        unsigned char *p = rec + HEADER_BYTES;
        memcpy(p, body, (size_t)e->body_len);
        p += e->body_len;
        unsigned char *tail = p;
        memcpy(p, topic, (size_t)topic_part_len);
        p += topic_part_len;
        const uint32_t props_len = (uint32_t)(e->props_len + crc_property_bytes);
        p[0] = (unsigned char)(props_len >> 8);
        p[1] = (unsigned char)props_len;
        p += PROPS_LEN_BYTES;
        memcpy(p, src + e->props_start, (size_t)e->props_len);
        p += e->props_len;
        memcpy(p, crc_prefix, (size_t)crc_prefix_len);
        p += crc_prefix_len;
        /* crc32(tail, crc32(body, crc32(header))), the body's CRC reused */
        uLong crc = crc32(0L, rec, HEADER_BYTES);
#if ZLIB_VERNUM >= 0x12c0
        if (e->body_len != op_body_len) {
            combine_op = crc32_combine_gen((z_off_t)e->body_len);
            op_body_len = e->body_len;
        }
        crc = crc32_combine_op(crc, body_crc, combine_op);
#else
        crc = crc32_combine(crc, body_crc, (z_off_t)e->body_len);
#endif
        crc = crc32(crc, tail, (uInt)(p - tail));
        static const char hex[] = "0123456789ABCDEF";
        for (int d = 7; d >= 0; d--) { /* b"%08X\x02" % crc */
            p[d] = (unsigned char)hex[crc & 0xF];
            crc >>= 4;
        }
        p[8] = 0x02;
        rec += e->total_size;
    }
    result = PyTuple_Pack(2, out, sizes);

done:
    Py_XDECREF(out);
    Py_XDECREF(sizes);
    PyMem_Free(batch);
    Py_DECREF(entries);
    PyBuffer_Release(&blob);
    return result;
}

/* --- placing a batch ------------------------------------------------------------------------- */

static PyObject *
place_batch(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (!g_ready) {
        PyErr_SetString(PyExc_RuntimeError, "_record_encode.init() has not completed");
        return NULL;
    }
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "place_batch(blob, sizes, phys_offset): %zd arguments given, 3 expected", nargs);
        return NULL;
    }
    PyObject *sizes = args[1];
    if (!PyList_Check(sizes) && !PyTuple_Check(sizes)) {
        PyErr_Format(PyExc_TypeError, "sizes must be a list or tuple, not %.100s", Py_TYPE(sizes)->tp_name);
        return NULL;
    }
    /* before the sizes are read: __index__ may run Python code */
    long long phys_offset;
    if (field_value(args[2], INT64_MIN, INT64_MAX, "phys_offset", &phys_offset) < 0) {
        return NULL;
    }
    Py_buffer blob;
    if (PyObject_GetBuffer(args[0], &blob, PyBUF_WRITABLE) < 0) { /* held: the blob cannot be resized */
        return NULL;
    }
    Py_INCREF(sizes); /* __index__ above may have dropped every other reference to it */
    PyObject *positions = NULL;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(sizes);
    long long *at = PyMem_New(long long, n > 0 ? n : 1);
    if (at == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* Every size read and checked before anything is written: a bad list leaves the blob as it was. */
    Py_ssize_t position = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long size;
        if (entry_value(PySequence_Fast_GET_ITEM(sizes, i), i, "record size", POS_PHYS_OFFSET + 8,
                        blob.len - position, PyExc_ValueError, &size) < 0) {
            goto done;
        }
        if (phys_offset > INT64_MAX - position) {
            PyErr_Format(g_range_error, "record %zd: phys offset %lld + %zd passes the 8-byte field", i, phys_offset,
                         position);
            goto done;
        }
        at[i] = position;
        position += (Py_ssize_t)size;
    }
    positions = PyList_New(n); /* may run a collection: the blob is held, the sizes are copied */
    if (positions == NULL) {
        goto done;
    }
    unsigned char *buf = (unsigned char *)blob.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        const long long record_phys_offset = phys_offset + at[i];
        put_be64(buf + at[i] + POS_PHYS_OFFSET, (uint64_t)record_phys_offset);
        PyObject *value = PyLong_FromLongLong(record_phys_offset);
        if (value == NULL) {
            Py_CLEAR(positions);
            goto done;
        }
        PyList_SET_ITEM(positions, i, value);
    }

done:
    PyMem_Free(at);
    Py_DECREF(sizes);
    PyBuffer_Release(&blob);
    return positions;
}

static void
clear_state(void) /* the module is going away: nothing encodes any more */
{
    g_ready = 0;
    Py_CLEAR(g_range_error);
}

static PyObject *
init(PyObject *Py_UNUSED(module), PyObject *args)
{
    const char *header_format, *topic_len_format, *props_len_format;
    Py_ssize_t header_bytes, record_crc_property_bytes;
    unsigned long record_magic;
    Py_buffer crc_prefix;
    PyObject *range_error;
    if (!PyArg_ParseTuple(args, "snssky*nO:init", &header_format, &header_bytes, &topic_len_format,
                          &props_len_format, &record_magic, &crc_prefix, &record_crc_property_bytes,
                          &range_error)) {
        return NULL;
    }
    if (strcmp(header_format, HEADER_FORMAT) != 0 || header_bytes != HEADER_BYTES
        || strcmp(topic_len_format, TOPIC_LEN_FORMAT) != 0 || strcmp(props_len_format, PROPS_LEN_FORMAT) != 0) {
        PyErr_Format(PyExc_ValueError, "record header %s (%zd bytes), topic length %s, properties length %s is not "
                     "the layout compiled in: %s (%d bytes), %s, %s", header_format, header_bytes,
                     topic_len_format, props_len_format, HEADER_FORMAT, HEADER_BYTES, TOPIC_LEN_FORMAT,
                     PROPS_LEN_FORMAT);
        goto refused;
    }
    /* the record CRC property: its name, \x01 (the prefix), then the 8 hex digits and \x02 */
    if (crc_prefix.len < 2 || crc_prefix.len > RECORD_CRC_PREFIX_MAX
        || record_crc_property_bytes != crc_prefix.len + RECORD_CRC_VALUE_BYTES
        || memchr(crc_prefix.buf, 0x01, (size_t)crc_prefix.len) != (char *)crc_prefix.buf + crc_prefix.len - 1) {
        PyErr_Format(PyExc_ValueError, "the record CRC property (a %zd-byte prefix, %zd bytes in all) is not a "
                     "name, \\x01 and %d value bytes", crc_prefix.len, record_crc_property_bytes,
                     RECORD_CRC_VALUE_BYTES);
        goto refused;
    }
    if (record_magic > 0xFFFFFFFFUL) {
        PyErr_SetString(PyExc_ValueError, "record_magic does not fit 4 bytes");
        goto refused;
    }
    if (!PyExceptionClass_Check(range_error)) {
        PyErr_SetString(PyExc_TypeError, "range_error must be an exception class (struct.error)");
        goto refused;
    }
    /* Calling init again replaces the state; an encode under way has copied what it reads. */
    memcpy(g_record_crc_prefix, crc_prefix.buf, (size_t)crc_prefix.len);
    g_record_crc_prefix_len = crc_prefix.len;
    PyBuffer_Release(&crc_prefix);
    g_record_magic = (uint32_t)record_magic;
    Py_XSETREF(g_range_error, Py_NewRef(range_error));
    g_ready = 1;
    Py_RETURN_NONE;

refused: /* the state stays as it was */
    PyBuffer_Release(&crc_prefix);
    return NULL;
}

static PyMethodDef methods[] = {
    {"init", (PyCFunction)init, METH_VARARGS,
     "init(header_format, header_bytes, topic_len_format, props_len_format, record_magic, record_crc_prefix, "
     "record_crc_property_bytes, range_error): the layout and constants encode_scanned writes."},
    {"encode_scanned", (PyCFunction)(void (*)(void))encode_scanned, METH_FASTCALL,
     "encode_scanned(blob, entries, topic_part, queue_id, first_queue_offset, store_timestamp_ms, "
     "born_timestamp_ms, born_ip, born_port, store_ip, store_port, sys_flag, reconsume_times) "
     "-> (bytearray, list[int])"},
    {"place_batch", (PyCFunction)(void (*)(void))place_batch, METH_FASTCALL,
     "place_batch(blob, sizes, phys_offset) -> list[int]: each record's PHYSICALOFFSET written"},
    {NULL, NULL, 0, NULL},
};

static void
module_free(void *Py_UNUSED(module))
{
    clear_state();
}

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nodes.store._record_encode",
    .m_doc = "A scanned batch body written as commitlog records, then placed (twins of record_batch's loops).",
    .m_size = -1,
    .m_methods = methods,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__record_encode(void)
{
    return PyModule_Create(&module);
}
