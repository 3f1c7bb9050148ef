/* The producer's encoder of a batch body (encode_checked of nodes.store._batch_body): the same
 * results as nodes/store/message_batch.py's encode_checked_python, which stays the reference.
 *
 * About 2 us a message in Python, the properties formatted into one text and the parts
 * joined. Here each message's properties go straight into one scratch text as UTF-8 (a dict
 * of str, the common case, without calling Python), the body's size is known before anything
 * is written, and the output is allocated once at its final size. It evaluates in the Python
 * encoder's order and raises its errors: ValueError for properties over the limit (same text),
 * struct.error (handed over by init_encode) for a flag or an entry size the head cannot hold,
 * whatever unpacking, formatting, len() or the buffer protocol raise for the rest. One
 * difference, on purpose: a body whose buffer is not len(body) bytes (an array of wider
 * items) raises ValueError where Python would write a wrong entry.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../common/_byte_order.h"
#include "_batch_entry.h"

#include <stdint.h>
#include <string.h>

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

PyObject *
batch_body_encode_checked(PyObject *Py_UNUSED(module), PyObject *entries_arg)
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

PyObject *
batch_body_init_encode(PyObject *Py_UNUSED(module), PyObject *args)
{
    const char *entry_head_format, *props_len_format;
    Py_ssize_t entry_bytes_min, props_bytes_max;
    PyObject *range_error;
    if (!PyArg_ParseTuple(args, "snsnO:init_encode", &entry_head_format, &entry_bytes_min, &props_len_format,
                          &props_bytes_max, &range_error)) {
        return NULL;
    }
    if (batch_entry_check_layout(entry_head_format, entry_bytes_min, props_bytes_max) < 0) {
        return NULL;
    }
    if (strcmp(props_len_format, PROPS_LEN_FORMAT) != 0) {
        PyErr_Format(PyExc_ValueError, "properties length %s is not the layout compiled in: %s", props_len_format,
                     PROPS_LEN_FORMAT);
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

void
batch_body_clear_encode(void)
{
    g_encode_ready = 0;
    Py_CLEAR(g_range_error);
}
