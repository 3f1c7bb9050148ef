/* A producer's batch body (nodes/store/message_batch.py's format) read and written, compiled:
 * the same results as nodes/store/record_batch.py's scan_batch_body_python and
 * nodes/store/message_batch.py's encode_checked_python, which stay the reference.
 *
 * The encoder (encode_checked) is the producer's: about 2 us a message in Python, the
 * properties formatted into one text and the parts joined. Here each message's properties go
 * straight into one scratch text as UTF-8 (a dict of str, the common case, without calling
 * Python), the body's size is known before anything is written, and the output is allocated
 * once at its final size. It evaluates in the Python encoder's order and raises its errors:
 * ValueError for properties over the limit (same text), struct.error (handed over by
 * init_encode) for a flag or an entry size the head cannot hold, whatever unpacking,
 * formatting, len() or the buffer protocol raise for the rest. One difference, on purpose: a
 * body whose buffer is not len(body) bytes (an array of wider items) raises ValueError where
 * Python would write a wrong entry.
 *
 * The scan (scan_batch_body) walks the entries' framing and checks every properties text in
 * one pass over the bytes, building no Python object until the batch is known plain; it
 * returns None for exactly the bodies the Python scan refuses. Its rules, the names it looks
 * for and the ScannedBatch class come from init_scan(), which refuses an entry layout this
 * file was not written for (record_batch then keeps the Python scan).
 *
 * Python API:
 *   init_scan(scanned_batch, entry_head_format, entry_bytes_min, props_bytes_max, tags_first,
 *             reserved_name, delay_name)                              (nodes.store.record_batch)
 *   scan_batch_body(blob, body_bytes_max) -> ScannedBatch | None
 *   init_encode(entry_head_format, entry_bytes_min, props_len_format, props_bytes_max,
 *               range_error)                                         (nodes.store.message_batch)
 *   encode_checked(entries) -> bytes
 */

#define _GNU_SOURCE /* memmem */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../common/_byte_order.h"

#include <stdint.h>
#include <string.h>

#define PROPS_LEN_FORMAT ">h"
#define PROPS_LEN_BYTES 2
#define PROPS_LEN_MAX 32767 /* a Java short */
#define ENTRY_FIELDS 6 /* body start, body length, flag, properties start, properties length, tag code */

/* The layout of a batch body entry this file reads: nodes.store.message_batch.ENTRY_HEAD. */
#define ENTRY_HEAD_FORMAT ">iiiii"
#define ENTRY_HEAD_BYTES 20
#define ENTRY_POS_FLAG 12
#define ENTRY_POS_BODY_LEN 16
#define ENTRY_BYTES_MIN (ENTRY_HEAD_BYTES + PROPS_LEN_BYTES)
#define NAME_MAX_BYTES 64

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

static PyObject *
scan_batch_body(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
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

static PyObject *
init_scan(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *scanned_batch, *tags_first, *reserved, *delay_name;
    const char *entry_head_format;
    Py_ssize_t entry_bytes_min, props_bytes_max;
    if (!PyArg_ParseTuple(args, "OsnnSSS:init_scan", &scanned_batch, &entry_head_format, &entry_bytes_min,
                          &props_bytes_max, &tags_first, &reserved, &delay_name)) {
        return NULL;
    }
    if (strcmp(entry_head_format, ENTRY_HEAD_FORMAT) != 0 || entry_bytes_min != ENTRY_BYTES_MIN) {
        PyErr_Format(PyExc_ValueError, "batch entry head %s (entries of %zd bytes at least) is not the layout "
                     "compiled in: %s (%d)", entry_head_format, entry_bytes_min, ENTRY_HEAD_FORMAT, ENTRY_BYTES_MIN);
        return NULL;
    }
    if (props_bytes_max < 0 || props_bytes_max > PROPS_LEN_MAX) {
        PyErr_Format(PyExc_ValueError, "props_bytes_max %zd is out of range 0..%d", props_bytes_max, PROPS_LEN_MAX);
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

/* --- the producer's encoder ------------------------------------------------------------------ */

static Py_ssize_t g_entry_props_max; /* PROPERTIES_BYTES_MAX: a batch entry's properties */
static PyObject *g_range_error; /* struct.error: what ENTRY_HEAD.pack raises for a field it cannot pack */
static int g_encode_ready;

/* One message of the batch being encoded, read before the body is allocated. */
typedef struct {
    PyObject *body; /* owned: __len__, __format__ or __index__ may drop every other reference */
    Py_ssize_t body_len; /* len(body), as the Python encoder writes it */
    Py_ssize_t props_at, props_len; /* in the properties scratch */
    int32_t flag;
} message_t;

/* Properties text of all messages, back to back, grown as needed. */
typedef struct {
    char *text;
    Py_ssize_t len, cap;
} scratch_t;

static int
scratch_put(scratch_t *s, const char *p, Py_ssize_t n)
{
    if (n > s->cap - s->len) {
        if (n > PY_SSIZE_T_MAX / 2 - s->len) {
            PyErr_NoMemory();
            return -1;
        }
        Py_ssize_t cap = (s->len + n) * 2;
        char *grown = PyMem_Realloc(s->text, (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        s->text = grown;
        s->cap = cap;
    }
    if (n > 0) { /* an empty text into a scratch not allocated yet: memcpy to NULL is undefined */
        memcpy(s->text + s->len, p, (size_t)n);
    }
    s->len += n;
    return 0;
}

/* A name or value as f"{obj}" formats it, UTF-8, then the separator. */
static int
scratch_put_text(scratch_t *s, PyObject *obj, char separator)
{
    PyObject *text = PyUnicode_CheckExact(obj) ? Py_NewRef(obj) : PyObject_Format(obj, NULL); /* f"{obj}" */
    if (text == NULL) {
        return -1;
    }
    int rc;
    if (PyUnicode_IS_ASCII(text)) {
        rc = scratch_put(s, (const char *)PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text));
    }
    else {
        PyObject *utf8 = PyUnicode_AsUTF8String(text); /* UnicodeEncodeError for a lone surrogate, as .encode() */
        rc = utf8 == NULL ? -1 : scratch_put(s, PyBytes_AS_STRING(utf8), PyBytes_GET_SIZE(utf8));
        Py_XDECREF(utf8);
    }
    Py_DECREF(text);
    return rc < 0 ? -1 : scratch_put(s, &separator, 1);
}

/* name\x01value\x02 for each pair of properties.items(), in its order. */
static int
put_properties(scratch_t *s, PyObject *properties)
{
    if (PyDict_CheckExact(properties)) {
        /* A dict of str: no Python code runs, so the borrowed pairs stay valid. */
        Py_ssize_t at = 0, start = s->len;
        PyObject *name, *value;
        while (PyDict_Next(properties, &at, &name, &value)) {
            if (!PyUnicode_CheckExact(name) || !PyUnicode_CheckExact(value)) {
                s->len = start; /* something to format: the general way from the start */
                goto general;
            }
            if (scratch_put_text(s, name, 0x01) < 0 || scratch_put_text(s, value, 0x02) < 0) {
                return -1;
            }
        }
        return 0;
    }
general: ;
    PyObject *items = PyObject_CallMethod(properties, "items", NULL);
    PyObject *iter = items == NULL ? NULL : PyObject_GetIter(items);
    Py_XDECREF(items);
    if (iter == NULL) {
        return -1;
    }
    PyObject *item;
    int rc = 0;
    while (rc == 0 && (item = PyIter_Next(iter)) != NULL) {
        PyObject *pair = PySequence_Tuple(item); /* for name, value in ...: any pair unpacks */
        Py_DECREF(item);
        if (pair == NULL) {
            rc = -1;
            break;
        }
        if (PyTuple_GET_SIZE(pair) != 2) {
            PyErr_Format(PyExc_ValueError, "a property item must unpack to (name, value), not %zd values",
                         PyTuple_GET_SIZE(pair));
            rc = -1;
        }
        else {
            rc = scratch_put_text(s, PyTuple_GET_ITEM(pair, 0), 0x01);
            rc = rc < 0 ? -1 : scratch_put_text(s, PyTuple_GET_ITEM(pair, 1), 0x02);
        }
        Py_DECREF(pair);
    }
    Py_DECREF(iter);
    return rc < 0 || PyErr_Occurred() ? -1 : 0;
}

/* One (body, flag, properties) read into *m, its properties into the scratch, in the order the
 * Python encoder evaluates them: the properties and their limit, len(body), then the flag. */
static int
read_message(PyObject *entry, Py_ssize_t i, Py_ssize_t props_max, PyObject *range_error, scratch_t *s,
             message_t *m)
{
    PyObject *fields = PySequence_Tuple(entry); /* owned: a list entry could change under __format__ */
    if (fields == NULL) {
        return -1;
    }
    int rc = -1;
    if (PyTuple_GET_SIZE(fields) != 3) {
        PyErr_Format(PyExc_ValueError, "message %zd must unpack to (body, flag, properties), not %zd values", i,
                     PyTuple_GET_SIZE(fields));
        goto done;
    }
    PyObject *body = PyTuple_GET_ITEM(fields, 0), *flag = PyTuple_GET_ITEM(fields, 1);
    PyObject *properties = PyTuple_GET_ITEM(fields, 2);
    m->props_at = s->len;
    int any = PyDict_CheckExact(properties) ? PyDict_GET_SIZE(properties) > 0 : PyObject_IsTrue(properties);
    if (any < 0 || (any && put_properties(s, properties) < 0)) {
        goto done;
    }
    m->props_len = s->len - m->props_at;
    if (m->props_len > props_max) {
        PyErr_Format(PyExc_ValueError, "properties are %zd bytes, over the %zd-byte limit", m->props_len, props_max);
        goto done;
    }
    m->body_len = PyBytes_CheckExact(body) ? PyBytes_GET_SIZE(body) : PyObject_Size(body);
    if (m->body_len < 0) {
        goto done;
    }
    if (!PyIndex_Check(flag)) {
        PyErr_Format(range_error, "message %zd: flag must be an integer, not %.100s", i, Py_TYPE(flag)->tp_name);
        goto done;
    }
    if (m->body_len > INT32_MAX - ENTRY_BYTES_MIN - m->props_len) {
        PyErr_Format(range_error, "message %zd: an entry of a %zd-byte body does not fit its 4-byte size", i,
                     m->body_len);
        goto done;
    }
    PyObject *index = PyNumber_Index(flag);
    if (index == NULL) {
        goto done;
    }
    int overflow;
    long long value = PyLong_AsLongLongAndOverflow(index, &overflow);
    if (!(value == -1 && PyErr_Occurred()) && (overflow || value < INT32_MIN || value > INT32_MAX)) {
        PyErr_Format(range_error, "message %zd: flag %S is out of range %d..%d", i, index, INT32_MIN, INT32_MAX);
    }
    Py_DECREF(index);
    if (PyErr_Occurred()) {
        goto done;
    }
    m->flag = (int32_t)value;
    m->body = Py_NewRef(body);
    rc = 0;

done:
    Py_DECREF(fields);
    return rc;
}

static PyObject *
encode_checked(PyObject *Py_UNUSED(module), PyObject *entries_arg)
{
    if (!g_encode_ready) {
        PyErr_SetString(PyExc_RuntimeError, "_batch_body.init_encode() has not completed");
        return NULL;
    }
    /* What init_encode() set, copied: formatting a property runs Python code. */
    PyObject *range_error = Py_NewRef(g_range_error);
    const Py_ssize_t props_max = g_entry_props_max;
    /* A tuple of its own: nothing run below can change which messages there are. */
    PyObject *entries = PySequence_Tuple(entries_arg);
    if (entries == NULL) {
        Py_DECREF(range_error);
        return NULL;
    }
    const Py_ssize_t n = PyTuple_GET_SIZE(entries);
    scratch_t props = {NULL, 0, 0};
    PyObject *result = NULL;
    Py_ssize_t read = 0;
    message_t *batch = PyMem_New(message_t, n > 0 ? n : 1);
    if (batch == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t total = 0;
    for (; read < n; read++) {
        if (read_message(PyTuple_GET_ITEM(entries, read), read, props_max, range_error, &props, &batch[read]) < 0) {
            goto done;
        }
        const Py_ssize_t size = ENTRY_BYTES_MIN + batch[read].body_len + batch[read].props_len;
        if (total > PY_SSIZE_T_MAX - size) {
            PyErr_SetString(PyExc_OverflowError, "the batch body does not fit in memory");
            read++;
            goto done;
        }
        total += size;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) {
        goto done;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < n; i++) {
        const message_t *m = &batch[i];
        const char *body;
        Py_buffer view = {.obj = NULL};
        if (PyBytes_CheckExact(m->body)) {
            body = PyBytes_AS_STRING(m->body);
        }
        else {
            /* as b"".join takes it; its bytes must be the len() already written (a buffer of
             * wider items, or one resized since, would make a wrong entry: refused) */
            if (PyObject_GetBuffer(m->body, &view, PyBUF_SIMPLE) < 0) {
                Py_CLEAR(result);
                goto done;
            }
            if (view.len != m->body_len) {
                PyErr_Format(PyExc_ValueError, "message %zd: a body of %zd bytes has len() %zd", i, view.len,
                             m->body_len);
                PyBuffer_Release(&view);
                Py_CLEAR(result);
                goto done;
            }
            body = view.buf;
        }
        const int32_t size = (int32_t)(ENTRY_BYTES_MIN + m->body_len + m->props_len);
        put_be32(out, (uint32_t)size);
        memset(out + 4, 0, 8); /* magic and body CRC: 0, as RocketMQ's producer writes them */
        put_be32(out + ENTRY_POS_FLAG, (uint32_t)m->flag);
        put_be32(out + ENTRY_POS_BODY_LEN, (uint32_t)m->body_len);
        out += ENTRY_HEAD_BYTES;
        if (m->body_len > 0) { /* an empty body may have no buffer at all: memcpy from NULL is undefined */
            memcpy(out, body, (size_t)m->body_len);
        }
        out += m->body_len;
        if (view.obj != NULL) {
            PyBuffer_Release(&view);
        }
        out[0] = (unsigned char)(m->props_len >> 8);
        out[1] = (unsigned char)m->props_len;
        out += PROPS_LEN_BYTES;
        if (m->props_len > 0) { /* no message had properties: the scratch was never allocated */
            memcpy(out, props.text + m->props_at, (size_t)m->props_len);
        }
        out += m->props_len;
    }

done:
    for (Py_ssize_t i = 0; i < read; i++) {
        Py_DECREF(batch[i].body);
    }
    PyMem_Free(batch);
    PyMem_Free(props.text);
    Py_DECREF(entries);
    Py_DECREF(range_error);
    return result;
}

static PyObject *
init_encode(PyObject *Py_UNUSED(module), PyObject *args)
{
    const char *entry_head_format, *props_len_format;
    Py_ssize_t entry_bytes_min, props_bytes_max;
    PyObject *range_error;
    if (!PyArg_ParseTuple(args, "snsnO:init_encode", &entry_head_format, &entry_bytes_min, &props_len_format,
                          &props_bytes_max, &range_error)) {
        return NULL;
    }
    if (strcmp(entry_head_format, ENTRY_HEAD_FORMAT) != 0 || entry_bytes_min != ENTRY_BYTES_MIN
        || strcmp(props_len_format, PROPS_LEN_FORMAT) != 0) {
        PyErr_Format(PyExc_ValueError, "batch entry head %s (entries of %zd bytes at least), properties length %s "
                     "is not the layout compiled in: %s (%d), %s", entry_head_format, entry_bytes_min,
                     props_len_format, ENTRY_HEAD_FORMAT, ENTRY_BYTES_MIN, PROPS_LEN_FORMAT);
        return NULL;
    }
    if (props_bytes_max < 0 || props_bytes_max > PROPS_LEN_MAX) {
        PyErr_Format(PyExc_ValueError, "props_bytes_max %zd is out of range 0..%d", props_bytes_max, PROPS_LEN_MAX);
        return NULL;
    }
    if (!PyExceptionClass_Check(range_error)) {
        PyErr_SetString(PyExc_TypeError, "range_error must be an exception class (struct.error)");
        return NULL;
    }
    g_entry_props_max = props_bytes_max;
    Py_XSETREF(g_range_error, Py_NewRef(range_error));
    g_encode_ready = 1;
    Py_RETURN_NONE;
}

static void
clear_state(void) /* the module is going away: nothing scans or encodes any more */
{
    g_scan_ready = 0;
    g_encode_ready = 0;
    Py_CLEAR(g_scanned_batch);
    Py_CLEAR(g_range_error);
}

static PyMethodDef methods[] = {
    {"init_scan", (PyCFunction)init_scan, METH_VARARGS,
     "init_scan(scanned_batch, entry_head_format, entry_bytes_min, props_bytes_max, tags_first, reserved_name, "
     "delay_name): the class, layout and names scan_batch_body uses."},
    {"scan_batch_body", (PyCFunction)(void (*)(void))scan_batch_body, METH_FASTCALL,
     "scan_batch_body(blob, body_bytes_max) -> ScannedBatch | None"},
    {"init_encode", (PyCFunction)init_encode, METH_VARARGS,
     "init_encode(entry_head_format, entry_bytes_min, props_len_format, props_bytes_max, range_error): the layout "
     "and limit encode_checked writes."},
    {"encode_checked", (PyCFunction)encode_checked, METH_O,
     "encode_checked(entries) -> bytes: a batch body of (body, flag, properties)"},
    {NULL, NULL, 0, NULL},
};

static void
module_free(void *Py_UNUSED(module))
{
    clear_state();
}

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nodes.store._batch_body",
    .m_doc = "A producer's batch body scanned and encoded (compiled twins of the Python loops).",
    .m_size = -1,
    .m_methods = methods,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__batch_body(void)
{
    return PyModule_Create(&module);
}
