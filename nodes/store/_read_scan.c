/* The common case of a pull's scan loop, compiled: the same walk as
 * nodes/store/read_scan.py's scan_units_python, which stays the reference.
 *
 * A pull walks consume-queue units (phys offset, size, tag hash) and hands out the records
 * they point at, each checked where it lies in the mapped segment: in full the first time
 * this store hands it out (framing and record CRC), its body CRC on later reads. In Python the
 * unit unpack, the field unpack, the zlib call with its slice and the run bookkeeping cost
 * about 2 us a record, most of the master's scan. Here they cost zlib's pass over the body.
 *
 * scan_units walks from `index` while every unit is the common case, and stops, without
 * taking it, at the first unit that is not: a hole, a batch that would be full (or a record
 * that is no longer in memory: the caps on disk are the Python loop's business), a record
 * outside the current segment's written bytes or outside the known-checked extent it was
 * given, a record that fails its check, or a tag mismatch before any record was taken. The
 * caller's general loop takes that unit, with the same rules, and calls again.
 *
 * Python API (called by nodes.store.read_scan only):
 *   init(...)  record_rules_init's arguments (the layout and constants)
 *   scan_units(units, index, view, seg_start, seg_written, known_checked, known_lo, known_hi,
 *              on_disk_below, count_max, bytes_max, records_bytes, tag_hashes, sizes, runs,
 *              run_start, run_end, newly_checked)
 *       -> (index, records_bytes, last_phys_offset or None, run_start, run_end)
 *   sizes gets each taken record's size, runs each finished (view, start, end) run of adjacent
 *   records, newly_checked the [start, end) phys ranges checked in full (merged when adjacent).
 */

#include "_record_rules.h"

/* A consume-queue unit (nodes.store.consume_queue.CQ_UNIT ">qiq"); a re-read checks the body
 * fields (nodes.store.read_check.BODY_FIELDS), the body CRC at POS_BODY_CRC. */
#define UNIT_BYTES 20

static int64_t g_hole_size;

/* read_check.body_checks: size, magic, own phys offset, body length within the record, body CRC. */
static int
body_ok(const unsigned char *rec, Py_ssize_t size, int64_t at)
{
    if (be_i32(rec + POS_TOTAL_SIZE) != size || be_u32(rec + POS_MAGIC) != g_record_magic
        || be_i64(rec + POS_PHYS_OFFSET) != at) {
        return 0;
    }
    const int32_t body_len = be_i32(rec + POS_BODY_LEN);
    if (body_len < 0 || (int64_t)body_len > (int64_t)size - HEADER_BYTES) {
        return 0;
    }
    uLong crc = crc32(crc32(0L, Z_NULL, 0), rec + HEADER_BYTES, (uInt)body_len);
    return (uint32_t)crc == be_u32(rec + POS_BODY_CRC);
}

/* newly_checked gets [start, end), merged into its last range when that one ends at start. */
static int
note_checked(PyObject *newly_checked, int64_t start, int64_t end)
{
    const Py_ssize_t n = PyList_GET_SIZE(newly_checked);
    if (n > 0) {
        PyObject *last = PyList_GET_ITEM(newly_checked, n - 1);
        if (PyTuple_Check(last) && PyTuple_GET_SIZE(last) == 2) {
            long long last_end = PyLong_AsLongLong(PyTuple_GET_ITEM(last, 1));
            if (last_end == -1 && PyErr_Occurred()) {
                return -1;
            }
            if (last_end == start) {
                PyObject *merged = Py_BuildValue("(OL)", PyTuple_GET_ITEM(last, 0), (long long)end);
                if (merged == NULL) {
                    return -1;
                }
                return PyList_SetItem(newly_checked, n - 1, merged); /* steals merged */
            }
        }
    }
    PyObject *range = Py_BuildValue("(LL)", (long long)start, (long long)end);
    if (range == NULL) {
        return -1;
    }
    int rc = PyList_Append(newly_checked, range);
    Py_DECREF(range);
    return rc;
}

static int
append_run(PyObject *runs, PyObject *view_obj, Py_ssize_t start, Py_ssize_t end)
{
    PyObject *run = Py_BuildValue("(Onn)", view_obj, start, end);
    if (run == NULL) {
        return -1;
    }
    int rc = PyList_Append(runs, run);
    Py_DECREF(run);
    return rc;
}

static PyObject *
scan_units(PyObject *Py_UNUSED(module), PyObject *args)
{
    if (!g_ready) {
        PyErr_SetString(PyExc_RuntimeError, "_read_scan.init() has not completed");
        return NULL;
    }
    Py_buffer units, view;
    PyObject *view_obj, *tag_hashes, *sizes, *runs, *newly_checked;
    Py_ssize_t index, run_start, run_end;
    long long seg_start, seg_written, known_lo, known_hi, on_disk_below, records_bytes_arg;
    Py_ssize_t count_max, bytes_max;
    int known_checked;
    if (!PyArg_ParseTuple(args, "y*nOLLpLLLnnLOO!O!nnO!:scan_units", &units, &index, &view_obj, &seg_start,
                          &seg_written, &known_checked, &known_lo, &known_hi, &on_disk_below, &count_max,
                          &bytes_max, &records_bytes_arg, &tag_hashes, &PyList_Type, &sizes, &PyList_Type, &runs,
                          &run_start, &run_end, &PyList_Type, &newly_checked)) {
        return NULL;
    }
    if (PyObject_GetBuffer(view_obj, &view, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&units);
        return NULL;
    }
    const int filtered = tag_hashes != Py_None;
    if (filtered && !PyAnySet_Check(tag_hashes)) {
        PyBuffer_Release(&units);
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "tag_hashes must be a set, a frozenset or None");
        return NULL;
    }
    const unsigned char *unit_bytes = (const unsigned char *)units.buf;
    const unsigned char *seg = (const unsigned char *)view.buf;
    const Py_ssize_t unit_count = units.len / UNIT_BYTES;
    int64_t records_bytes = (int64_t)records_bytes_arg;
    int64_t last_phys_offset = -1;
    int took_any_unit = 0;
    PyObject *result = NULL;
    if (index < 0) {
        PyErr_SetString(PyExc_ValueError, "index must not be negative");
        goto done;
    }

    for (; index < unit_count; index++) {
        const unsigned char *unit = unit_bytes + index * UNIT_BYTES;
        const int64_t phys_offset = be_i64(unit);
        const int32_t size = be_i32(unit + 8);
        const int64_t tag_hash = be_i64(unit + 12);
        if (size == g_hole_size && phys_offset == 0) {
            break;
        }
        const Py_ssize_t taken = PyList_GET_SIZE(sizes);
        if (taken > 0 && (phys_offset < (int64_t)on_disk_below || taken >= count_max
                          || records_bytes + size > (int64_t)bytes_max)) {
            break;
        }
        if (filtered) {
            PyObject *key = PyLong_FromLongLong(tag_hash);
            if (key == NULL) {
                goto done;
            }
            int member = PySet_Contains(tag_hashes, key);
            Py_DECREF(key);
            if (member < 0) {
                goto done;
            }
            if (!member) {
                if (taken == 0) {
                    break;
                }
                last_phys_offset = phys_offset;
                took_any_unit = 1;
                continue;
            }
        }
        /* int64 throughout: a size is an int32, a phys offset below 2^62 in any real store */
        const int64_t end_phys_offset = phys_offset + size;
        if (size < g_record_bytes_min || phys_offset < (int64_t)seg_start || end_phys_offset > (int64_t)seg_written
            || phys_offset < (int64_t)known_lo || phys_offset >= (int64_t)known_hi
            || end_phys_offset - (int64_t)seg_start > (int64_t)view.len) {
            break;
        }
        const Py_ssize_t pos = (Py_ssize_t)(phys_offset - (int64_t)seg_start);
        const unsigned char *rec = seg + pos;
        if (known_checked && end_phys_offset <= (int64_t)known_hi) {
            if (!body_ok(rec, size, phys_offset)) {
                break;
            }
        }
        else {
            if (!record_framing_ok(rec, size, phys_offset)) {
                break;
            }
            if (note_checked(newly_checked, phys_offset, end_phys_offset) < 0) {
                goto done;
            }
        }
        if (run_start >= 0 && run_end == pos) {
            run_end = pos + size;
        }
        else {
            if (run_start >= 0 && append_run(runs, view_obj, run_start, run_end) < 0) {
                goto done;
            }
            run_start = pos;
            run_end = pos + size;
        }
        PyObject *size_obj = PyLong_FromLong(size);
        if (size_obj == NULL) {
            goto done;
        }
        int rc = PyList_Append(sizes, size_obj);
        Py_DECREF(size_obj);
        if (rc < 0) {
            goto done;
        }
        records_bytes += size;
        last_phys_offset = phys_offset;
        took_any_unit = 1;
    }
    if (took_any_unit) {
        result = Py_BuildValue("(nLLnn)", index, (long long)records_bytes, (long long)last_phys_offset, run_start,
                               run_end);
    }
    else {
        result = Py_BuildValue("(nLOnn)", index, (long long)records_bytes, Py_None, run_start, run_end);
    }

done:
    PyBuffer_Release(&units);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *
init(PyObject *Py_UNUSED(module), PyObject *args)
{
    /* record_rules_init's arguments, then the consume queue's unit format, size and hole mark */
    const Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n < 3) {
        PyErr_SetString(PyExc_TypeError, "init() takes the record rules, then unit_format, unit_bytes, hole_size");
        return NULL;
    }
    const char *unit_format;
    Py_ssize_t unit_bytes;
    long long hole_size;
    PyObject *tail = PyTuple_GetSlice(args, n - 3, n);
    if (tail == NULL) {
        return NULL;
    }
    int ok = PyArg_ParseTuple(tail, "snL:init", &unit_format, &unit_bytes, &hole_size);
    if (ok && (strcmp(unit_format, ">qiq") != 0 || unit_bytes != UNIT_BYTES)) {
        PyErr_Format(PyExc_ValueError, "consume-queue unit %s (%zd bytes) is not the layout compiled in: >qiq (%d)",
                     unit_format, unit_bytes, UNIT_BYTES);
        ok = 0;
    }
    Py_DECREF(tail);
    if (!ok) {
        return NULL;
    }
    PyObject *rules = PyTuple_GetSlice(args, 0, n - 3);
    if (rules == NULL) {
        return NULL;
    }
    PyObject *result = record_rules_init(rules);
    Py_DECREF(rules);
    if (result != NULL) {
        g_hole_size = (int64_t)hole_size;
    }
    return result;
}

static PyMethodDef methods[] = {
    {"init", (PyCFunction)init, METH_VARARGS,
     "init(<the record rules, as _record_check.init takes them>, unit_format, unit_bytes, hole_size)"},
    {"scan_units", (PyCFunction)scan_units, METH_VARARGS,
     "scan_units(units, index, view, seg_start, seg_written, known_checked, known_lo, known_hi, on_disk_below, "
     "count_max, bytes_max, records_bytes, tag_hashes, sizes, runs, run_start, run_end, newly_checked) -> "
     "(index, records_bytes, last_phys_offset or None, run_start, run_end)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "nodes.store._read_scan",
    .m_doc = "The common case of a pull's scan loop (the compiled twin of read_scan.scan_units_python).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__read_scan(void)
{
    return PyModule_Create(&module);
}
