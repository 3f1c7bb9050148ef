/* The layout of a producer's batch body entry (nodes.store.message_batch.ENTRY_HEAD) and the
 * functions of the compiled module nodes.store._batch_body, which is built from three files:
 * _batch_body.c (the module), _batch_scan.c (the master's scan) and _batch_encode.c (the
 * producer's encoder). */

#ifndef MQLAB_BATCH_ENTRY_H
#define MQLAB_BATCH_ENTRY_H

#include <Python.h>

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

/* _batch_body.c: what both inits check of the layout Python hands them; 0, or -1 with
 * ValueError set. */
int batch_entry_check_layout(const char *entry_head_format, Py_ssize_t entry_bytes_min, Py_ssize_t props_bytes_max);

/* _batch_scan.c */
PyObject *batch_body_init_scan(PyObject *module, PyObject *args);
PyObject *batch_body_scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
void batch_body_clear_scan(void);

/* _batch_encode.c */
PyObject *batch_body_init_encode(PyObject *module, PyObject *args);
PyObject *batch_body_encode_checked(PyObject *module, PyObject *entries);
void batch_body_clear_encode(void);

#endif
