/* Pulled commitlog records to MessageExt, compiled: the same loop as
 * nodes/client/pull_decode.py's decode_messages_python, which stays the reference.
 *
 * A pull at batch 1024 spends most of the client's CPU walking records and building property
 * dicts in Python; here the walk, the header fields, the property split and the ids cost a few
 * hundred nanoseconds per record, and what is left is building the Python objects themselves.
 *
 * Every rule is the Python loop's, including its corner cases: the same framing checks and
 * CorruptRecordError messages, UTF-8 errors raised as UnicodeDecodeError (the Python loop's
 * bytes.decode() raises exactly that), a topic slice clipped at the end of the whole buffer,
 * properties split on \x02 then at the first \x01, the record CRC property dropped, the tag
 * test done with `in`, and a negative physical offset formatted like Python's
 * f"{x:016X}". The record layout (nodes.store.record.HEADER) is checked once by init(): a
 * layout this file does not know makes init raise, and pull_decode then keeps the Python loop.
 *
 * Building a message: with `slot_fields` (init's last argument: the 14 field names, when
 * MessageExt is a slots dataclass whose generated __init__ only assigns its fields) a message is
 * allocated and its slots filled in place, skipping the Python-level __init__ call (about a third
 * of a record's cost). Its fields then hold only str, bytes, int and a dict of str (MessageExt's
 * types), which can never lead back to the message, so it is taken off the cycle collector's
 * lists at once: a batch of 1024 messages otherwise made the collector walk every one of them as
 * they aged through its generations (a tenth of a pulling client's CPU, measured). Without
 * `slot_fields`, message_ext is called with the 14 fields.
 *
 * Python API (called by nodes.client.pull_decode only):
 *   init(message_ext, corrupt_error, header_format, header_bytes, record_bytes_min,
 *        record_magic, tag_key, uniq_key, record_crc_key, min_key, max_key, slot_fields)
 *   decode_messages(records: bytes, broker_name, min_offset, max_offset, tags) -> list
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h> /* T_OBJECT_EX, READONLY: the slots a message is filled through */

#include "../common/_byte_order.h"
#include "../common/_record_layout.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MESSAGE_EXT_ARGS 14


/* Property names repeat from record to record: one str per name, kept for the life of the
 * process, so building a dict reuses names whose hashes are already computed. Bounded: a
 * producer inventing names without end only stops being cached. */
#define KEY_CACHE_MAX 64

static PyObject *g_message_ext;   /* the MessageExt type (any callable taking the 14 fields) */
static PyObject *g_corrupt_error; /* CorruptRecordError */
static PyObject *g_tag_key, *g_uniq_key, *g_record_crc_key, *g_min_key, *g_max_key;
static uint32_t g_record_magic;
static Py_ssize_t g_record_bytes_min;
static PyObject *g_key_cache[KEY_CACHE_MAX]; /* ASCII str objects */
static int g_key_cache_len;
static int g_ready; /* init() has set every g_ object above */
/* MessageExt when its slots are filled in place (see the top of this file), else NULL; the
 * slots' offsets in the order of the 14 fields */
static PyTypeObject *g_slot_type;
static Py_ssize_t g_slot_offsets[MESSAGE_EXT_ARGS];

static int
is_ascii(const unsigned char *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] & 0x80) {
            return 0;
        }
    }
    return 1;
}

/* bytes -> str as bytes.decode() does it (strict UTF-8), with an ASCII fast path. */
static PyObject *
decode_utf8(const unsigned char *p, Py_ssize_t n)
{
    if (is_ascii(p, n)) {
        PyObject *s = PyUnicode_New(n, 127);
        if (s != NULL) {
            memcpy(PyUnicode_DATA(s), p, (size_t)n);
        }
        return s;
    }
    return PyUnicode_DecodeUTF8((const char *)p, n, "strict");
}

/* A property name as a str, from the cache when it is there. New reference. */
static PyObject *
property_name(const unsigned char *p, Py_ssize_t n)
{
    for (int i = 0; i < g_key_cache_len; i++) {
        PyObject *k = g_key_cache[i];
        if (PyUnicode_GET_LENGTH(k) == n && memcmp(PyUnicode_DATA(k), p, (size_t)n) == 0) {
            return Py_NewRef(k);
        }
    }
    PyObject *name = decode_utf8(p, n);
    if (name != NULL && g_key_cache_len < KEY_CACHE_MAX && PyUnicode_IS_ASCII(name)) {
        PyUnicode_InternInPlace(&name);
        g_key_cache[g_key_cache_len++] = Py_NewRef(name);
    }
    return name;
}

/* record.decode_properties(props.decode()) without the record CRC property: pairs split on
 * \x02, empty pairs skipped, each pair split at its first \x01 (no \x01: the value is ""),
 * a repeated name keeps its first place and its last value. Both separators are ASCII, so
 * they never sit inside a multi-byte character, and splitting the bytes first gives the same
 * pieces as splitting the decoded text. When a piece is not UTF-8 the whole text is decoded
 * once more to raise the UnicodeDecodeError the Python loop raises (same position). */
static PyObject *
decode_properties(const unsigned char *p, Py_ssize_t n, PyObject *record_crc_key)
{
    PyObject *props = PyDict_New();
    if (props == NULL) {
        return NULL;
    }
    const unsigned char *cur = p, *stop = p + n;
    while (cur < stop) {
        const unsigned char *pair_end = memchr(cur, PAIR_SEPARATOR, (size_t)(stop - cur));
        if (pair_end == NULL) {
            pair_end = stop;
        }
        if (pair_end > cur) {
            const unsigned char *sep = memchr(cur, NAME_SEPARATOR, (size_t)(pair_end - cur));
            const unsigned char *name_end = sep != NULL ? sep : pair_end;
            const unsigned char *value_start = sep != NULL ? sep + 1 : pair_end;
            PyObject *name = property_name(cur, name_end - cur);
            if (name == NULL) {
                goto utf8_error;
            }
            PyObject *value = decode_utf8(value_start, pair_end - value_start);
            if (value == NULL) { /* dropped or not, Python decodes every byte of the text */
                Py_DECREF(name);
                goto utf8_error;
            }
            if (name == record_crc_key || (PyUnicode_GET_LENGTH(name) == PyUnicode_GET_LENGTH(record_crc_key)
                                           && PyUnicode_Compare(name, record_crc_key) == 0)) {
                /* the store's own checksum, not a user property */
                Py_DECREF(name);
                Py_DECREF(value);
            }
            else {
                int rc = PyDict_SetItem(props, name, value);
                Py_DECREF(name);
                Py_DECREF(value);
                if (rc < 0) {
                    Py_DECREF(props);
                    return NULL;
                }
            }
        }
        cur = pair_end + 1;
    }
    return props;

utf8_error:
    Py_DECREF(props);
    if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        PyObject *whole = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
        if (whole == NULL) { /* the whole text's error, the one Python raises, is set */
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(traceback);
        }
        else { /* cannot happen: pieces of valid UTF-8 split at ASCII bytes are valid */
            Py_DECREF(whole);
            PyErr_Restore(type, value, traceback);
        }
    }
    return NULL;
}

/* f"{host}{phys_offset:016X}" where host is the 8 store-host bytes in upper-case hex. */
static PyObject *
offset_msg_id(const unsigned char *store_host, int64_t phys_offset)
{
    static const char hex[] = "0123456789ABCDEF";
    char text[STORE_HOST_BYTES * 2 + 24];
    int n = 0;
    for (int i = 0; i < STORE_HOST_BYTES; i++) {
        text[n++] = hex[store_host[i] >> 4];
        text[n++] = hex[store_host[i] & 0xF];
    }
    if (phys_offset >= 0) {
        uint64_t v = (uint64_t)phys_offset;
        for (int i = 15; i >= 0; i--) {
            text[n + i] = hex[v & 0xF];
            v >>= 4;
        }
        n += 16;
    }
    else { /* Python pads after the sign to a width of 16: "-" then at least 15 digits */
        n += snprintf(text + n, sizeof(text) - (size_t)n, "-%015llX",
                      (unsigned long long)(0 - (uint64_t)phys_offset));
    }
    PyObject *s = PyUnicode_New(n, 127);
    if (s != NULL) {
        memcpy(PyUnicode_DATA(s), text, (size_t)n);
    }
    return s;
}

static PyObject *
decode_messages(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (!g_ready) {
        PyErr_SetString(PyExc_RuntimeError, "_record_decode.init() has not completed");
        return NULL;
    }
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError,
                     "decode_messages(records, broker_name, min_offset, max_offset, tags): %zd arguments given",
                     nargs);
        return NULL;
    }
    PyObject *records = args[0], *broker_name = args[1], *tags = args[4];
    if (!PyBytes_CheckExact(records)) {
        PyErr_SetString(PyExc_TypeError, "records must be bytes");
        return NULL;
    }
    /* Own references to what init() set: building a message runs Python code (MessageExt's
     * __init__, a collection's finalizers), which may call init() again and replace them. */
    PyObject *message_ext = Py_NewRef(g_message_ext), *corrupt_error = Py_NewRef(g_corrupt_error);
    PyTypeObject *slot_type = (PyTypeObject *)Py_XNewRef((PyObject *)g_slot_type);
    Py_ssize_t slot_offsets[MESSAGE_EXT_ARGS];
    memcpy(slot_offsets, g_slot_offsets, sizeof(slot_offsets));
    PyObject *tag_key = Py_NewRef(g_tag_key), *uniq_key = Py_NewRef(g_uniq_key);
    PyObject *record_crc_key = Py_NewRef(g_record_crc_key);
    PyObject *min_key = Py_NewRef(g_min_key), *max_key = Py_NewRef(g_max_key);
    const uint32_t record_magic = g_record_magic;
    const Py_ssize_t record_bytes_min = g_record_bytes_min;
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(records);
    const Py_ssize_t end = PyBytes_GET_SIZE(records);

    PyObject *out = NULL, *min_s = NULL, *max_s = NULL, *topic = NULL;
    const unsigned char *topic_raw = NULL;
    Py_ssize_t topic_raw_len = -1;
    char message[160];

    min_s = PyObject_Str(args[2]);
    max_s = min_s == NULL ? NULL : PyObject_Str(args[3]);
    out = max_s == NULL ? NULL : PyList_New(0);
    if (out == NULL) {
        goto error;
    }

    Py_ssize_t pos = 0;
    while (pos < end) {
        if (end - pos < HEADER_BYTES) {
            snprintf(message, sizeof(message), "pull response: %zd trailing bytes at %zd, less than a header",
                     end - pos, pos);
            PyErr_SetString(corrupt_error, message);
            goto error;
        }
        const unsigned char *rec = buf + pos;
        int32_t total_size = be_i32(rec + POS_TOTAL_SIZE);
        uint32_t magic = be_u32(rec + POS_MAGIC);
        int32_t body_len = be_i32(rec + POS_BODY_LEN);
        int64_t rec_end = (int64_t)pos + total_size;
        int64_t body_end = (int64_t)pos + HEADER_BYTES + body_len;
        if (magic != record_magic || total_size < record_bytes_min || rec_end > end || body_len < 0
            || body_end + 3 > rec_end) {
            snprintf(message, sizeof(message), "pull response: bad record at %zd (magic 0x%08x, size %d)", pos,
                     (unsigned int)magic, (int)total_size);
            PyErr_SetString(corrupt_error, message);
            goto error;
        }
        int64_t topic_end = body_end + 1 + buf[body_end];
        /* records[topic_end + 2:rec_end]: empty when the topic length overruns the record */
        int64_t props_start = topic_end + 2;
        PyObject *props = props_start < rec_end
            ? decode_properties(buf + props_start, (Py_ssize_t)(rec_end - props_start), record_crc_key)
            : PyDict_New();
        if (props == NULL) {
            goto error;
        }
        if (tags != Py_None) {
            PyObject *tag = PyDict_GetItemWithError(props, tag_key);
            if (tag == NULL && PyErr_Occurred()) {
                Py_DECREF(props);
                goto error;
            }
            int found = PySequence_Contains(tags, tag != NULL ? tag : Py_None);
            if (found <= 0) {
                Py_DECREF(props);
                if (found < 0) {
                    goto error;
                }
                pos = (Py_ssize_t)rec_end;
                continue;
            }
        }
        /* records[body_end + 1:topic_end]: a slice, so clipped at the end of the whole buffer */
        int64_t topic_stop = topic_end < end ? topic_end : end;
        Py_ssize_t raw_len = (Py_ssize_t)(topic_stop - (body_end + 1));
        const unsigned char *raw = buf + body_end + 1;
        if (topic == NULL || raw_len != topic_raw_len || memcmp(raw, topic_raw, (size_t)raw_len) != 0) {
            Py_XDECREF(topic);
            topic = decode_utf8(raw, raw_len);
            if (topic == NULL) {
                Py_DECREF(props);
                goto error;
            }
            topic_raw = raw;
            topic_raw_len = raw_len;
        }
        PyObject *offset_id = offset_msg_id(rec + POS_STORE_HOST, be_i64(rec + POS_PHYS_OFFSET));
        if (offset_id == NULL || PyDict_SetItem(props, min_key, min_s) < 0
            || PyDict_SetItem(props, max_key, max_s) < 0) {
            Py_XDECREF(offset_id);
            Py_DECREF(props);
            goto error;
        }
        /* MessageClientExt#getMsgId: the producer's UNIQ_KEY when set and non-empty */
        PyObject *msg_id = PyDict_GetItemWithError(props, uniq_key);
        int truthy = msg_id != NULL ? PyObject_IsTrue(msg_id) : 0;
        if (truthy < 0 || (msg_id == NULL && PyErr_Occurred())) {
            Py_DECREF(offset_id);
            Py_DECREF(props);
            goto error;
        }
        if (!truthy) {
            msg_id = offset_id;
        }
        PyObject *fields[MESSAGE_EXT_ARGS] = {
            Py_NewRef(topic),
            PyBytes_FromStringAndSize((const char *)rec + HEADER_BYTES, body_len),
            props, /* owned by this array from here on */
            Py_NewRef(msg_id),
            offset_id,
            PyLong_FromLong(be_i32(rec + POS_QUEUE_ID)),
            PyLong_FromLongLong(be_i64(rec + POS_QUEUE_OFFSET)),
            PyLong_FromLongLong(be_i64(rec + POS_PHYS_OFFSET)),
            PyLong_FromLong(be_i32(rec + POS_RECONSUME_TIMES)),
            PyLong_FromLongLong(be_i64(rec + POS_STORE_TIMESTAMP)),
            PyLong_FromLongLong(be_i64(rec + POS_BORN_TIMESTAMP)),
            Py_NewRef(broker_name),
            PyLong_FromLong(be_i32(rec + POS_FLAG)),
            PyLong_FromLong(total_size),
        };
        PyObject *msg = NULL;
        int built = 1;
        for (int i = 0; i < MESSAGE_EXT_ARGS; i++) {
            built &= fields[i] != NULL;
        }
        if (built && slot_type != NULL) {
            msg = slot_type->tp_alloc(slot_type, 0);
            if (msg != NULL) {
                for (int i = 0; i < MESSAGE_EXT_ARGS; i++) { /* the slot takes the reference */
                    *(PyObject **)((char *)msg + slot_offsets[i]) = fields[i];
                    fields[i] = NULL;
                }
                PyObject_GC_UnTrack(msg);
            }
        }
        else if (built) {
            msg = PyObject_Vectorcall(message_ext, fields, MESSAGE_EXT_ARGS, NULL);
        }
        for (int i = 0; i < MESSAGE_EXT_ARGS; i++) {
            Py_XDECREF(fields[i]);
        }
        if (msg == NULL) {
            goto error;
        }
        int rc = PyList_Append(out, msg);
        Py_DECREF(msg);
        if (rc < 0) {
            goto error;
        }
        pos = (Py_ssize_t)rec_end;
    }
    goto done;

error:
    Py_CLEAR(out);
done:
    Py_XDECREF(topic);
    Py_XDECREF(min_s);
    Py_XDECREF(max_s);
    Py_DECREF(message_ext);
    Py_XDECREF(slot_type);
    Py_DECREF(corrupt_error);
    Py_DECREF(tag_key);
    Py_DECREF(uniq_key);
    Py_DECREF(record_crc_key);
    Py_DECREF(min_key);
    Py_DECREF(max_key);
    return out;
}

static int
check_str(PyObject *obj, const char *what)
{
    if (!PyUnicode_Check(obj) || !PyUnicode_IS_ASCII(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an ASCII str", what);
        return -1;
    }
    return 0;
}

static void
clear_state(void) /* the module is going away: nothing decodes any more */
{
    g_ready = 0;
    Py_CLEAR(g_message_ext);
    Py_CLEAR(g_slot_type);
    Py_CLEAR(g_corrupt_error);
    Py_CLEAR(g_tag_key);
    Py_CLEAR(g_uniq_key);
    Py_CLEAR(g_record_crc_key);
    Py_CLEAR(g_min_key);
    Py_CLEAR(g_max_key);
    for (int i = 0; i < g_key_cache_len; i++) {
        Py_CLEAR(g_key_cache[i]);
    }
    g_key_cache_len = 0;
}

/* The offsets of `names`' slots in instances of `type`, in order, when a message can be built
 * by filling them: a GC type of fixed size with object's own __new__ (nothing runs at
 * allocation), and each name a writable object slot defined on the type itself. Else raises
 * TypeError (pull_decode then keeps the Python loop). */
static int
slots_of(PyObject *type_obj, PyObject *names, Py_ssize_t *offsets)
{
    if (!PyType_Check(type_obj)) {
        PyErr_SetString(PyExc_TypeError, "slot_fields needs message_ext to be a class");
        return -1;
    }
    PyTypeObject *type = (PyTypeObject *)type_obj;
    if (!PyType_HasFeature(type, Py_TPFLAGS_HAVE_GC) || type->tp_itemsize != 0
        || type->tp_new != PyBaseObject_Type.tp_new || type->tp_alloc == NULL) {
        PyErr_Format(PyExc_TypeError, "%s cannot be built by filling its slots", type->tp_name);
        return -1;
    }
    if (!PyTuple_Check(names) || PyTuple_GET_SIZE(names) != MESSAGE_EXT_ARGS) {
        PyErr_Format(PyExc_TypeError, "slot_fields must be a tuple of the %d field names", MESSAGE_EXT_ARGS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < MESSAGE_EXT_ARGS; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        PyObject *descr = PyUnicode_Check(name) ? PyDict_GetItemWithError(type->tp_dict, name) : NULL;
        if (descr == NULL && PyErr_Occurred()) {
            return -1;
        }
        PyMemberDef *member = descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type)
            ? ((PyMemberDescrObject *)descr)->d_member : NULL;
        if (member == NULL || member->type != T_OBJECT_EX || (member->flags & READONLY)) {
            PyErr_Format(PyExc_TypeError, "%s has no writable slot %R", type->tp_name, name);
            return -1;
        }
        offsets[i] = member->offset;
    }
    return 0;
}

static PyObject *
init(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *message_ext, *corrupt_error, *tag_key, *uniq_key, *record_crc_key, *min_key, *max_key;
    PyObject *slot_fields;
    const char *header_format;
    Py_ssize_t header_bytes, record_bytes_min;
    unsigned long record_magic;
    if (!PyArg_ParseTuple(args, "OOsnnkUUUUUO:init", &message_ext, &corrupt_error, &header_format,
                          &header_bytes, &record_bytes_min, &record_magic, &tag_key, &uniq_key,
                          &record_crc_key, &min_key, &max_key, &slot_fields)) {
        return NULL;
    }
    if (strcmp(header_format, HEADER_FORMAT) != 0 || header_bytes != HEADER_BYTES) {
        PyErr_Format(PyExc_ValueError, "record header %s (%zd bytes) is not the layout compiled in: %s (%d bytes)",
                     header_format, header_bytes, HEADER_FORMAT, HEADER_BYTES);
        return NULL;
    }
    if (record_bytes_min < HEADER_BYTES + 3 || record_magic > 0xFFFFFFFFUL) {
        PyErr_SetString(PyExc_ValueError, "record_bytes_min or record_magic out of range");
        return NULL;
    }
    if (!PyCallable_Check(message_ext) || !PyExceptionClass_Check(corrupt_error)) {
        PyErr_SetString(PyExc_TypeError, "init needs the MessageExt type and an exception class");
        return NULL;
    }
    if (check_str(tag_key, "tag_key") < 0 || check_str(uniq_key, "uniq_key") < 0
        || check_str(record_crc_key, "record_crc_key") < 0 || check_str(min_key, "min_key") < 0
        || check_str(max_key, "max_key") < 0) {
        return NULL;
    }
    Py_ssize_t slot_offsets[MESSAGE_EXT_ARGS];
    if (slot_fields != Py_None && slots_of(message_ext, slot_fields, slot_offsets) < 0) {
        return NULL;
    }
    /* Calling init again replaces the state; a decode under way keeps its own references, and
     * the name cache stays (its entries are names, whatever init was given). */
    Py_XSETREF(g_message_ext, Py_NewRef(message_ext));
    Py_XSETREF(g_slot_type, slot_fields == Py_None ? NULL : (PyTypeObject *)Py_NewRef(message_ext));
    memcpy(g_slot_offsets, slot_offsets, sizeof(g_slot_offsets));
    Py_XSETREF(g_corrupt_error, Py_NewRef(corrupt_error));
    g_record_bytes_min = record_bytes_min;
    g_record_magic = (uint32_t)record_magic;
    /* The known names go first into the name cache, so records' names are these very objects
     * and the dict lookups below find them by identity. */
    PyObject *given[] = {record_crc_key, tag_key, uniq_key, min_key, max_key};
    PyObject **slots[] = {&g_record_crc_key, &g_tag_key, &g_uniq_key, &g_min_key, &g_max_key};
    for (size_t i = 0; i < sizeof(given) / sizeof(given[0]); i++) {
        PyObject *key = property_name((const unsigned char *)PyUnicode_DATA(given[i]), PyUnicode_GET_LENGTH(given[i]));
        if (key == NULL) {
            return NULL;
        }
        Py_XSETREF(*slots[i], key);
    }
    g_ready = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"init", (PyCFunction)init, METH_VARARGS,
     "init(message_ext, corrupt_error, header_format, header_bytes, record_bytes_min, record_magic, "
     "tag_key, uniq_key, record_crc_key, min_key, max_key, slot_fields): the classes and constants "
     "decode_messages uses."},
    {"decode_messages", (PyCFunction)(void (*)(void))decode_messages, METH_FASTCALL,
     "decode_messages(records: bytes, broker_name, min_offset, max_offset, tags) -> list[MessageExt]"},
    {NULL, NULL, 0, NULL},
};

static void
module_free(void *Py_UNUSED(module))
{
    clear_state();
}

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nodes.client._record_decode",
    .m_doc = "Pulled commitlog records to MessageExt (the compiled twin of pull_decode's Python loop).",
    .m_size = -1,
    .m_methods = methods,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__record_decode(void)
{
    return PyModule_Create(&module);
}
