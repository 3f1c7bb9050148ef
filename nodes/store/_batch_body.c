/* A producer's batch body (nodes/store/message_batch.py's format) read and written, compiled:
 * the module nodes.store._batch_body. The scan is the master's (_batch_scan.c), the encoder the
 * producer's (_batch_encode.c); the entry layout both read is in _batch_entry.h.
 *
 * Python API:
 *   init_scan(scanned_batch, entry_head_format, entry_bytes_min, props_bytes_max, tags_first,
 *             reserved_name, delay_name)                              (nodes.store.record_batch)
 *   scan_batch_body(blob, body_bytes_max) -> ScannedBatch | None
 *   init_encode(entry_head_format, entry_bytes_min, props_len_format, props_bytes_max,
 *               range_error)                                         (nodes.store.message_batch)
 *   encode_checked(entries) -> bytes
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_batch_entry.h"

#include <string.h>

int
batch_entry_check_layout(const char *entry_head_format, Py_ssize_t entry_bytes_min, Py_ssize_t props_bytes_max)
{
    if (strcmp(entry_head_format, ENTRY_HEAD_FORMAT) != 0 || entry_bytes_min != ENTRY_BYTES_MIN) {
        PyErr_Format(PyExc_ValueError, "batch entry head %s (entries of %zd bytes at least) is not the layout "
                     "compiled in: %s (%d)", entry_head_format, entry_bytes_min, ENTRY_HEAD_FORMAT, ENTRY_BYTES_MIN);
        return -1;
    }
    if (props_bytes_max < 0 || props_bytes_max > PROPS_LEN_MAX) {
        PyErr_Format(PyExc_ValueError, "props_bytes_max %zd is out of range 0..%d", props_bytes_max, PROPS_LEN_MAX);
        return -1;
    }
    return 0;
}

static PyMethodDef methods[] = {
    {"init_scan", (PyCFunction)batch_body_init_scan, METH_VARARGS,
     "init_scan(scanned_batch, entry_head_format, entry_bytes_min, props_bytes_max, tags_first, reserved_name, "
     "delay_name): the class, layout and names scan_batch_body uses."},
    {"scan_batch_body", (PyCFunction)(void (*)(void))batch_body_scan, METH_FASTCALL,
     "scan_batch_body(blob, body_bytes_max) -> ScannedBatch | None"},
    {"init_encode", (PyCFunction)batch_body_init_encode, METH_VARARGS,
     "init_encode(entry_head_format, entry_bytes_min, props_len_format, props_bytes_max, range_error): the layout "
     "and limit encode_checked writes."},
    {"encode_checked", (PyCFunction)batch_body_encode_checked, METH_O,
     "encode_checked(entries) -> bytes: a batch body of (body, flag, properties)"},
    {NULL, NULL, 0, NULL},
};

static void
module_free(void *Py_UNUSED(module)) /* the module is going away: nothing scans or encodes any more */
{
    batch_body_clear_scan();
    batch_body_clear_encode();
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
