/* The master's scan of a producer's batch body (scan_batch_body of nodes.store._batch_body):
 * the same results as nodes/store/record_batch.py's scan_batch_body_python, which stays the
 * reference.
 *
 * It walks the entries' framing and checks every properties text in one pass over the bytes,
 * building no Python object until the batch is known plain; it returns None for exactly the
 * bodies the Python scan refuses. Its rules, the names it looks for and the ScannedBatch class
 * come from init_scan(), which refuses an entry layout this file was not written for
 * (record_batch then keeps the Python scan).
 */

#define _GNU_SOURCE /* memmem */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../common/_byte_order.h"
#include "_batch_entry.h"

#include <stdint.h>
#include <string.h>

typedef struct {
    unsigned char text[NAME_MAX_BYTES];
    Py_ssize_t len;
} name_t;

static PyObject *g_scanned_batch; /* the ScannedBatch class */
static Py_ssize_t g_props_bytes_max; /* USER_PROPERTIES_BYTES_MAX */
static name_t g_tags_first, g_reserved, g_delay_name; /* "TAGS\x01", "__RECORD_CRC32", "DELAY\x01" */
static int g_scan_ready;

static int
contains(const unsigned char *text, Py_ssize_t len, const name_t *name)
{
    return memmem(text, (size_t)len, name->text, (size_t)name->len) != NULL;
}

/* Java's String.hashCode of an ASCII text (a char per byte) as a signed 32-bit int. */
static int32_t
java_hash(const unsigned char *text, Py_ssize_t len)
{
    uint32_t h = 0;
    for (Py_ssize_t i = 0; i < len; i++) {
        h = 31 * h + text[i];
    }
    return (int32_t)h;
}

/* The tag code of one entry's properties text: the hash of its last TAGS value, 0 without
 * one (record_batch._tag_code). The text is plain: pairs of name \x01 value \x02. */
static int32_t
tag_code(const unsigned char *props, Py_ssize_t len, const name_t *tags_first)
{
    const unsigned char *value = NULL;
    const unsigned char *pair = props, *stop = props + len;
    while (pair < stop) { /* every pair start: the last one named TAGS wins */
        const unsigned char *pair_end = memchr(pair, 0x02, (size_t)(stop - pair));
        if (pair_end == NULL) {
            break;
        }
        if (pair_end - pair >= tags_first->len && memcmp(pair, tags_first->text, (size_t)tags_first->len) == 0) {
            value = pair + tags_first->len; /* and keep looking: a later TAGS replaces it */
        }
        pair = pair_end + 1;
    }
    if (value == NULL) {
        return 0;
    }
    const unsigned char *value_end = memchr(value, 0x02, (size_t)(props + len - value));
    return java_hash(value, value_end - value);
}

/* One entry found plain. */
typedef struct {
    Py_ssize_t body_start, body_len, props_start, props_len;
    int32_t flag;
} scanned_t;

/* The properties of one entry checked as the Python scan checks all of them joined: ASCII,
 * separators alternating \x01 \x02 from a \x01 (the text ends with \x02, so each text's
 * alternation is the joined text's), neither the reserved name nor the delay name in it
 * (neither holds a \x02, so no match can straddle two texts). */
static int
props_plain(const unsigned char *props, Py_ssize_t len)
{
    unsigned char expect = 0x01;
    for (Py_ssize_t i = 0; i < len; i++) {
        unsigned char b = props[i];
        if (b & 0x80) {
            return 0;
        }
        if (b == 0x01 || b == 0x02) {
            if (b != expect) {
                return 0;
            }
            expect ^= 0x03;
        }
    }
    return expect == 0x01 && !contains(props, len, &g_reserved) && !contains(props, len, &g_delay_name);
}

PyObject *
batch_body_scan(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (!g_scan_ready) {
        PyErr_SetString(PyExc_RuntimeError, "_batch_body.init_scan() has not completed");
        return NULL;
    }
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "scan_batch_body(blob, body_bytes_max): %zd arguments given", nargs);
        return NULL;
    }
    PyObject *index = PyNumber_Index(args[1]);
    if (index == NULL) {
        return NULL;
    }
    int overflow;
    long long body_bytes_max = PyLong_AsLongLongAndOverflow(index, &overflow);
    Py_DECREF(index);
    if (body_bytes_max == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (overflow) { /* beyond any length: every body fits, or none does */
        body_bytes_max = overflow > 0 ? INT64_MAX : INT64_MIN;
    }
    /* What init_scan() set, copied: building the result runs Python code (ScannedBatch). */
    PyObject *scanned_batch = Py_NewRef(g_scanned_batch);
    const Py_ssize_t props_max = g_props_bytes_max;
    const name_t tags_first = g_tags_first;

    Py_buffer blob;
    if (PyObject_GetBuffer(args[0], &blob, PyBUF_SIMPLE) < 0) {
        Py_DECREF(scanned_batch);
        return NULL;
    }
    PyObject *result = NULL, *entries = NULL, *props = NULL;
    const unsigned char *buf = (const unsigned char *)blob.buf;
    const Py_ssize_t end = blob.len;
    /* at most one entry per ENTRY_BYTES_MIN + 1 bytes (a body is at least a byte) */
    const Py_ssize_t most = end / (ENTRY_BYTES_MIN + 1) + 1;
    scanned_t *found = PyMem_New(scanned_t, most);
    if (found == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t n = 0, pos = 0, props_total = 0;
    long long bodies = 0;
    int any_tags = 0;
    while (pos < end) {
        if (end - pos < ENTRY_BYTES_MIN) {
            goto refused;
        }
        const long long total_size = be_i32(buf + pos);
        const long long body_len = be_i32(buf + pos + ENTRY_POS_BODY_LEN);
        const long long entry_end = pos + total_size;
        if (body_len <= 0 || body_len > body_bytes_max || total_size < ENTRY_BYTES_MIN + body_len || entry_end > end) {
            goto refused;
        }
        const Py_ssize_t body_start = pos + ENTRY_HEAD_BYTES;
        const Py_ssize_t props_start = body_start + (Py_ssize_t)body_len + PROPS_LEN_BYTES;
        const Py_ssize_t props_len = (Py_ssize_t)entry_end - props_start; /* >= 0: total_size checked */
        if (((buf[props_start - 2] << 8) | buf[props_start - 1]) != props_len || props_len > props_max) {
            goto refused;
        }
        if (props_len > 0) {
            const unsigned char *text = buf + props_start;
            if (text[props_len - 1] != 0x02 || !props_plain(text, props_len)) {
                goto refused;
            }
            any_tags |= contains(text, props_len, &tags_first);
            props_total += props_len;
        }
        found[n++] = (scanned_t){body_start, (Py_ssize_t)body_len, props_start, props_len,
                                 be_i32(buf + pos + ENTRY_POS_FLAG)};
        bodies += body_len; /* each < 2**31, at most 2**63 / 2**31 of them: no overflow */
        pos = (Py_ssize_t)entry_end;
    }
    if (n == 0 || (n > 1 && bodies > body_bytes_max)) {
        goto refused;
    }

    entries = PyList_New(n);
    props = entries == NULL ? NULL : PyBytes_FromStringAndSize(NULL, props_total);
    if (props == NULL) {
        goto done;
    }
    char *props_out = PyBytes_AS_STRING(props);
    for (Py_ssize_t i = 0; i < n; i++) {
        const scanned_t *e = &found[i];
        memcpy(props_out, buf + e->props_start, (size_t)e->props_len);
        props_out += e->props_len;
        int32_t code = any_tags && e->props_len > 0 ? tag_code(buf + e->props_start, e->props_len, &tags_first) : 0;
        PyObject *entry = PyTuple_New(ENTRY_FIELDS);
        if (entry == NULL) {
            goto done;
        }
        PyList_SET_ITEM(entries, i, entry); /* the list owns it, filled or not */
        PyObject *fields[ENTRY_FIELDS] = {
            PyLong_FromSsize_t(e->body_start), PyLong_FromSsize_t(e->body_len), PyLong_FromLong(e->flag),
            PyLong_FromSsize_t(e->props_start), PyLong_FromSsize_t(e->props_len), PyLong_FromLong(code),
        };
        int built = 1;
        for (int f = 0; f < ENTRY_FIELDS; f++) {
            built &= fields[f] != NULL;
            PyTuple_SET_ITEM(entry, f, fields[f]); /* a NULL item is safe in a tuple being dropped */
        }
        if (!built) {
            goto done;
        }
    }
    result = PyObject_CallFunctionObjArgs(scanned_batch, args[0], entries, props, NULL);
    goto done;

refused:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(entries);
    Py_XDECREF(props);
    PyMem_Free(found);
    PyBuffer_Release(&blob);
    Py_DECREF(scanned_batch);
    return result;
}

static int
set_name(name_t *slot, PyObject *given, const char *what)
{
    if (!PyBytes_Check(given) || PyBytes_GET_SIZE(given) < 1 || PyBytes_GET_SIZE(given) > NAME_MAX_BYTES
        || memchr(PyBytes_AS_STRING(given), 0x02, (size_t)PyBytes_GET_SIZE(given)) != NULL) {
        PyErr_Format(PyExc_ValueError, "%s must be 1..%d bytes holding no \\x02", what, NAME_MAX_BYTES);
        return -1;
    }
    memcpy(slot->text, PyBytes_AS_STRING(given), (size_t)PyBytes_GET_SIZE(given));
    slot->len = PyBytes_GET_SIZE(given);
    return 0;
}

PyObject *
batch_body_init_scan(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *scanned_batch, *tags_first, *reserved, *delay_name;
    const char *entry_head_format;
    Py_ssize_t entry_bytes_min, props_bytes_max;
    if (!PyArg_ParseTuple(args, "OsnnSSS:init_scan", &scanned_batch, &entry_head_format, &entry_bytes_min,
                          &props_bytes_max, &tags_first, &reserved, &delay_name)) {
        return NULL;
    }
    if (batch_entry_check_layout(entry_head_format, entry_bytes_min, props_bytes_max) < 0) {
        return NULL;
    }
    if (!PyCallable_Check(scanned_batch)) {
        PyErr_SetString(PyExc_TypeError, "init_scan needs the ScannedBatch class");
        return NULL;
    }
    /* TAGS\x01 is how tag_code finds a pair: a name then its separator */
    const Py_ssize_t tags_len = PyBytes_GET_SIZE(tags_first);
    if (tags_len < 2 || PyBytes_AS_STRING(tags_first)[tags_len - 1] != 0x01
        || memchr(PyBytes_AS_STRING(tags_first), 0x01, (size_t)tags_len - 1) != NULL) {
        PyErr_SetString(PyExc_ValueError, "tags_first must be a property name then \\x01");
        return NULL;
    }
    name_t tags, reserved_name, delay;
    if (set_name(&tags, tags_first, "tags_first") < 0 || set_name(&reserved_name, reserved, "reserved_name") < 0
        || set_name(&delay, delay_name, "delay_name") < 0) {
        return NULL;
    }
    Py_XSETREF(g_scanned_batch, Py_NewRef(scanned_batch));
    g_props_bytes_max = props_bytes_max;
    g_tags_first = tags;
    g_reserved = reserved_name;
    g_delay_name = delay;
    g_scan_ready = 1;
    Py_RETURN_NONE;
}

void
batch_body_clear_scan(void)
{
    g_scan_ready = 0;
    Py_CLEAR(g_scanned_batch);
}
