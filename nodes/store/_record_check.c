/* Replicated commitlog bytes checked record by record, compiled: the same walk as
 * nodes/broker/ha_check.py's check_chunk_python (with nodes.store.record's index_fields and
 * _record_crc_matches), which stays the reference.
 *
 * A slave checks every record it receives before appending it; in Python the header unpack,
 * the three zlib calls with their slices and the "%08X" text cost most of the slave's main
 * thread during a replicated batch send. Here the walk and the CRC cost little more than
 * zlib's own pass over the bytes, and what is left is building each record's tuple.
 *
 * Every rule is the Python walk's: a chunk shorter than a blank marker asks for one, a blank
 * marker must end its segment exactly, a record needs the record magic and a size that fits
 * its segment, a record past the chunk's end asks for its size, and a record is valid when
 * its framing adds up, its PHYSICALOFFSET is its own position, no IPv6 flag is set, it ends
 * with the record CRC property whose 8 upper-case hex digits are the CRC-32 of the record up
 * to them (PHYSICALOFFSET hashed as zeros), and its topic and properties are UTF-8. The
 * reasons are the Python walk's texts, byte for byte. The record layout and the constants are
 * checked once by init(): a layout this file does not know makes init raise, and ha_check
 * then keeps the Python walk.
 *
 * Segment positions are computed as Python does (floor modulo), so a negative phys offset
 * gives the same answer; outside what int64 holds, or with a segment size that is not
 * positive (a meaningless call, which Python answers with ZeroDivisionError or nonsense),
 * check_chunk raises instead.
 *
 * whole_records_bytes is the master's framing walk over records it wrote itself moments ago
 * (ha_check.whole_records_bytes_python, ~0.4 us a record in Python: an unpack per record):
 * the same answer for any bytes-like data, short or garbage; anything not bytes-like raises
 * TypeError (the Python walk answers 0 for a sized object shorter than a frame).
 *
 * Python API (called by nodes.broker.ha_check only):
 *   init(header_format, header_bytes, record_bytes_min, record_magic, blank_magic,
 *        blank_bytes, phys_offset_pos, props_len_format, record_crc_prefix,
 *        record_crc_property_bytes, ipv6_sys_flags)
 *   check_chunk(data: buffer, phys_offset, segment_bytes)
 *       -> (valid_bytes, bad_phys_offset or None, reason, needed_bytes, records)
 *   records: [(phys_offset, total_size, topic, queue_id, queue_offset, store_timestamp,
 *              properties_text), ...]
 */

#include "_record_rules.h"

#include <stdio.h>

#define RECORD_FIELDS 7       /* a CheckedRecord tuple */
/* The reasons check_chunk_python gives, formatted the same way. */
#define REASON_BLANK "a blank marker of %d bytes does not end its segment"
#define REASON_MAGIC "no record magic (0x%08x)"
#define REASON_SIZE "a record size of %d bytes does not fit its segment"
#define REASON_RECORD "the record fails its checks (layout, own phys offset or CRC)"
/* bytes -> str as str(b, "utf-8") does it (strict), with an ASCII fast path. NULL with
 * UnicodeDecodeError set when the bytes are not UTF-8. */
static PyObject *
decode_utf8(const unsigned char *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] & 0x80) {
            return PyUnicode_DecodeUTF8((const char *)p, n, "strict");
        }
    }
    PyObject *s = PyUnicode_New(n, 127);
    if (s != NULL) {
        memcpy(PyUnicode_DATA(s), p, (size_t)n);
    }
    return s;
}


/* The last topic decoded, kept across records: a chunk's records mostly share one. */
typedef struct {
    const unsigned char *raw;
    Py_ssize_t raw_len;
    PyObject *text; /* owned */
} TopicMemo;

/* record.index_fields for the record in rec[0, size) at `at`, size already within
 * [record_bytes_min, what the chunk holds]: 1 and a new CheckedRecord tuple in *out when it
 * passes every check, 0 when it fails one, -1 with an exception set (out of memory). */
static int
index_fields(const unsigned char *rec, Py_ssize_t size, int64_t at, TopicMemo *topic, PyObject **out)
{
    *out = NULL;
    if (!record_framing_ok(rec, size, at)) {
        return 0;
    }
    /* where record_framing_ok found the topic and the properties */
    const int64_t topic_len_pos = (int64_t)HEADER_BYTES + be_i32(rec + POS_BODY_LEN);
    const int64_t topic_start = topic_len_pos + 1;
    const int64_t props_len_pos = topic_start + rec[topic_len_pos];

    const unsigned char *topic_raw = rec + topic_start;
    const Py_ssize_t topic_len = (Py_ssize_t)(props_len_pos - topic_start);
    if (topic->text == NULL || topic->raw_len != topic_len || memcmp(topic->raw, topic_raw, (size_t)topic_len) != 0) {
        PyObject *text = decode_utf8(topic_raw, topic_len);
        if (text == NULL) {
            goto decode_failed;
        }
        Py_XSETREF(topic->text, text);
        topic->raw = topic_raw;
        topic->raw_len = topic_len;
    }
    const int64_t props_start = props_len_pos + 2;
    const Py_ssize_t properties_len = (Py_ssize_t)(size - g_record_crc_property_bytes - props_start);
    PyObject *properties = decode_utf8(rec + props_start, properties_len); /* without the record CRC */
    if (properties == NULL) {
        goto decode_failed;
    }
    PyObject *fields[RECORD_FIELDS] = {
        PyLong_FromLongLong(at),
        PyLong_FromSsize_t(size),
        Py_NewRef(topic->text),
        PyLong_FromLong(be_i32(rec + POS_QUEUE_ID)),
        PyLong_FromLongLong(be_i64(rec + POS_QUEUE_OFFSET)),
        PyLong_FromLongLong(be_i64(rec + POS_STORE_TIMESTAMP)),
        properties, /* owned by this array from here on */
    };
    PyObject *tuple = PyTuple_New(RECORD_FIELDS);
    for (int i = 0; i < RECORD_FIELDS; i++) {
        if (fields[i] == NULL) {
            Py_CLEAR(tuple);
        }
    }
    if (tuple == NULL) {
        for (int i = 0; i < RECORD_FIELDS; i++) {
            Py_XDECREF(fields[i]);
        }
        return -1;
    }
    for (int i = 0; i < RECORD_FIELDS; i++) {
        PyTuple_SET_ITEM(tuple, i, fields[i]); /* steals */
    }
    *out = tuple;
    return 1;

decode_failed: /* not UTF-8 fails the check, as in Python; anything else (memory) is raised */
    if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
        return 0;
    }
    return -1;
}

/* Python's a % b for b > 0: never negative. */
static inline int64_t
floor_mod(int64_t a, int64_t b)
{
    int64_t r = a % b;
    return r < 0 ? r + b : r;
}

static PyObject *
check_chunk(PyObject *Py_UNUSED(module), PyObject *args)
{
    if (!g_ready) {
        PyErr_SetString(PyExc_RuntimeError, "_record_check.init() has not completed");
        return NULL;
    }
    Py_buffer view;
    long long phys_offset_arg, segment_bytes_arg;
    if (!PyArg_ParseTuple(args, "y*LL:check_chunk", &view, &phys_offset_arg, &segment_bytes_arg)) {
        return NULL;
    }
    const int64_t phys_offset = (int64_t)phys_offset_arg, segment_bytes = (int64_t)segment_bytes_arg;
    const unsigned char *buf = (const unsigned char *)view.buf;
    const Py_ssize_t end = view.len;
    if (segment_bytes <= 0) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "segment_bytes must be positive, got %lld", segment_bytes_arg);
        return NULL;
    }
    if (phys_offset > INT64_MAX - (int64_t)end) { /* every `at` below must fit */
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_OverflowError, "phys_offset + len(data) does not fit in 64 bits");
        return NULL;
    }

    TopicMemo topic = {NULL, 0, NULL};
    PyObject *result = NULL, *bad_at = NULL;
    Py_ssize_t pos = 0, needed_bytes = 0;
    int bad = 0;
    char reason[128] = "";
    PyObject *records = PyList_New(0);
    if (records == NULL) {
        goto done;
    }
    while (pos < end) {
        const int64_t at = phys_offset + pos;
        const int64_t segment_left = segment_bytes - floor_mod(at, segment_bytes); /* segment_end - at */
        if (end - pos < BLANK_BYTES) {
            needed_bytes = BLANK_BYTES;
            break;
        }
        const unsigned char *rec = buf + pos;
        const int32_t size = be_i32(rec + POS_TOTAL_SIZE);
        const uint32_t magic = be_u32(rec + POS_MAGIC);
        if (magic == g_blank_magic) {
            if ((int64_t)size != segment_left) {
                snprintf(reason, sizeof(reason), REASON_BLANK, (int)size);
                bad = 1;
                break;
            }
        }
        else if (magic != g_record_magic) {
            snprintf(reason, sizeof(reason), REASON_MAGIC, (unsigned int)magic);
            bad = 1;
            break;
        }
        else if (size < g_record_bytes_min || (int64_t)size > segment_left) {
            snprintf(reason, sizeof(reason), REASON_SIZE, (int)size);
            bad = 1;
            break;
        }
        /* here size > 0: a blank's equals segment_left, a record's is at least record_bytes_min */
        if ((int64_t)size > (int64_t)(end - pos)) {
            needed_bytes = size;
            break;
        }
        if (magic == g_record_magic) {
            PyObject *fields;
            int passed = index_fields(rec, size, at, &topic, &fields);
            if (passed < 0) {
                goto done;
            }
            if (!passed) {
                snprintf(reason, sizeof(reason), "%s", REASON_RECORD);
                bad = 1;
                break;
            }
            int rc = PyList_Append(records, fields);
            Py_DECREF(fields);
            if (rc < 0) {
                goto done;
            }
        }
        pos += size;
    }
    bad_at = bad ? PyLong_FromLongLong(phys_offset + pos) : Py_NewRef(Py_None);
    if (bad_at != NULL) {
        result = Py_BuildValue("(nOsnO)", pos, bad_at, reason, needed_bytes, records);
    }

done:
    Py_XDECREF(bad_at);
    Py_XDECREF(records);
    Py_XDECREF(topic.text);
    PyBuffer_Release(&view);
    return result;
}

/* ha_check.whole_records_bytes_python: how many bytes from the start are whole records by
 * their framing alone (size and magic). The end is len(data) as Python takes it, which for a
 * buffer of wider items (an array of ints) is fewer than its bytes. */
static PyObject *
whole_records_bytes(PyObject *Py_UNUSED(module), PyObject *data)
{
    if (!g_ready) {
        PyErr_SetString(PyExc_RuntimeError, "_record_check.init() has not completed");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    Py_ssize_t end = view.len;
    if (!PyBytes_CheckExact(data) && !PyByteArray_CheckExact(data)) {
        const Py_ssize_t len = PyObject_Size(data);
        if (len < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
        end = len < end ? len : end;
    }
    const unsigned char *buf = (const unsigned char *)view.buf;
    const uint32_t record_magic = g_record_magic;
    const Py_ssize_t record_bytes_min = g_record_bytes_min;
    Py_ssize_t pos = 0;
    while (end - pos >= BLANK_BYTES) { /* a frame: size (>i), magic (>I) */
        const int32_t size = be_i32(buf + pos + POS_TOTAL_SIZE);
        if (be_u32(buf + pos + POS_MAGIC) != record_magic || size < record_bytes_min || size > end - pos) {
            break;
        }
        pos += size;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(pos);
}

static PyObject *
init(PyObject *Py_UNUSED(module), PyObject *args)
{
    return record_rules_init(args);
}

static PyMethodDef methods[] = {
    {"init", (PyCFunction)init, METH_VARARGS,
     "init(header_format, header_bytes, record_bytes_min, record_magic, blank_magic, blank_bytes, "
     "phys_offset_pos, props_len_format, record_crc_prefix, record_crc_property_bytes, ipv6_sys_flags): "
     "the layout and constants check_chunk uses."},
    {"check_chunk", (PyCFunction)check_chunk, METH_VARARGS,
     "check_chunk(data, phys_offset, segment_bytes) -> (valid_bytes, bad_phys_offset, reason, needed_bytes, "
     "records)"},
    {"whole_records_bytes", (PyCFunction)whole_records_bytes, METH_O,
     "whole_records_bytes(data) -> int: the bytes of data that are whole records by their framing"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nodes.store._record_check",
    .m_doc = "Replicated commitlog bytes checked record by record (the compiled twin of ha_check's Python walk).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__record_check(void)
{
    return PyModule_Create(&module);
}
