/* A record's rules as a read or a replica checks them: the constants init() is given and the
 * framing-and-CRC test every check applies (nodes.store.read_check's record_checks and
 * nodes.store.record's index_fields, which stay the references). The header layout is
 * ../common/_record_layout.h.
 *
 * Shared by the compiled record check (_record_check.c) and the compiled read scan
 * (_read_scan.c). Each includes it once: the g_ values are static, so each module holds its
 * own copy, set by its own init(), which calls record_rules_init with the layout Python gives.
 */

#ifndef MQLAB_RECORD_RULES_H
#define MQLAB_RECORD_RULES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../common/_byte_order.h"
#include "../common/_record_layout.h"

#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define BLANK_BYTES 8         /* END_FILE_MIN_BLANK_BYTES: remaining_bytes (>i), BLANK_MAGIC (>I) */
#define CRC_HEX_DIGITS 8
#define CRC_PREFIX_MAX 64


static uint32_t g_record_magic, g_blank_magic, g_ipv6_sys_flags;
static Py_ssize_t g_record_bytes_min;
static Py_ssize_t g_record_crc_property_bytes; /* prefix, 8 hex digits, \x02 */
static unsigned char g_crc_prefix[CRC_PREFIX_MAX]; /* "__RECORD_CRC32\x01" */
static Py_ssize_t g_crc_prefix_len;
static int g_ready; /* init() has set every g_ value above */


/* record._record_crc_matches for the record in rec[0, size): it ends with the record CRC
 * prefix, 8 hex digits and \x02, and the digits are the upper-case CRC-32 of rec[0, 28),
 * 8 zero bytes (PHYSICALOFFSET) and rec[36, value_start). The caller has checked that the
 * properties, which end the record, are at least record_crc_property_bytes long. */
static int
record_crc_matches(const unsigned char *rec, Py_ssize_t size)
{
    static const unsigned char zero_phys_offset[PHYS_OFFSET_BYTES];
    static const char hex[] = "0123456789ABCDEF";
    const Py_ssize_t value_start = size - (CRC_HEX_DIGITS + 1);
    if (rec[size - 1] != PAIR_SEPARATOR
        || memcmp(rec + value_start - g_crc_prefix_len, g_crc_prefix, (size_t)g_crc_prefix_len) != 0) {
        return 0;
    }
    uLong crc = crc32(0L, Z_NULL, 0);
    crc = crc32(crc, rec, POS_PHYS_OFFSET);
    crc = crc32(crc, zero_phys_offset, PHYS_OFFSET_BYTES);
    crc = crc32(crc, rec + POS_PHYS_OFFSET + PHYS_OFFSET_BYTES,
                (uInt)(value_start - (POS_PHYS_OFFSET + PHYS_OFFSET_BYTES)));
    const unsigned char *digits = rec + value_start;
    for (int i = 0; i < CRC_HEX_DIGITS; i++) {
        if (digits[i] != (unsigned char)hex[(crc >> (4 * (CRC_HEX_DIGITS - 1 - i))) & 0xF]) {
            return 0;
        }
    }
    return 1;
}
/* Whether the record in rec[0, size) at `at` passes the framing and CRC checks: magic, its
 * size, its own PHYSICALOFFSET, no IPv6 flag, body, topic and properties lengths that add up to
 * the size, a topic of at least one byte, and the record CRC property ending the record. size
 * is at least g_record_bytes_min and rec holds size bytes. The topic and properties are not
 * decoded here (index_fields also requires UTF-8). */
static int
record_framing_ok(const unsigned char *rec, Py_ssize_t size, int64_t at)
{
    if (be_u32(rec + POS_MAGIC) != g_record_magic || be_i32(rec + POS_TOTAL_SIZE) != size
        || be_i64(rec + POS_PHYS_OFFSET) != at || (be_u32(rec + POS_SYS_FLAG) & g_ipv6_sys_flags) != 0) {
        return 0;
    }
    const int32_t body_len = be_i32(rec + POS_BODY_LEN);
    if (body_len < 0) {
        return 0;
    }
    /* positions inside the record; int64 so a body length near 2^31 cannot wrap */
    const int64_t topic_len_pos = (int64_t)HEADER_BYTES + body_len;
    if (topic_len_pos + 1 > size) {
        return 0;
    }
    const int64_t topic_start = topic_len_pos + 1;
    const int64_t props_len_pos = topic_start + rec[topic_len_pos];
    if (props_len_pos == topic_start || props_len_pos + 2 > size) {
        return 0;
    }
    const int16_t props_len = be_i16(rec + props_len_pos);
    if (props_len < g_record_crc_property_bytes || props_len_pos + 2 + props_len != size) {
        return 0;
    }
    return record_crc_matches(rec, size);
}

/* The body of each module's init(): checks the layout Python gives against the one compiled in
 * and sets the g_ values. None, or NULL with ValueError set. */
static PyObject *
record_rules_init(PyObject *args)
{
    const char *header_format, *props_len_format;
    Py_ssize_t header_bytes, record_bytes_min, blank_bytes, phys_offset_pos, record_crc_property_bytes;
    unsigned long record_magic, blank_magic, ipv6_sys_flags;
    Py_buffer prefix;
    if (!PyArg_ParseTuple(args, "snnkknnsy*nk:init", &header_format, &header_bytes, &record_bytes_min,
                          &record_magic, &blank_magic, &blank_bytes, &phys_offset_pos, &props_len_format, &prefix,
                          &record_crc_property_bytes, &ipv6_sys_flags)) {
        return NULL;
    }
    PyObject *result = NULL;
    if (strcmp(header_format, HEADER_FORMAT) != 0 || header_bytes != HEADER_BYTES
        || strcmp(props_len_format, PROPS_LEN_FORMAT) != 0 || blank_bytes != BLANK_BYTES
        || phys_offset_pos != POS_PHYS_OFFSET) {
        PyErr_Format(PyExc_ValueError,
                     "record header %s (%zd bytes, phys offset at %zd, properties length %s, blank %zd bytes) "
                     "is not the layout compiled in: %s (%d bytes, phys offset at %d, properties length %s, "
                     "blank %d bytes)",
                     header_format, header_bytes, phys_offset_pos, props_len_format, blank_bytes, HEADER_FORMAT,
                     HEADER_BYTES, POS_PHYS_OFFSET, PROPS_LEN_FORMAT, BLANK_BYTES);
        goto done;
    }
    if (prefix.len < 1 || prefix.len > CRC_PREFIX_MAX
        || record_crc_property_bytes != prefix.len + CRC_HEX_DIGITS + 1) {
        PyErr_SetString(PyExc_ValueError, "the record CRC property is not a prefix, 8 hex digits and \\x02");
        goto done;
    }
    /* a record's fixed header, the topic length, a one-byte topic, the properties length and
     * the record CRC property at least: the reads index_fields makes need this much */
    if (record_bytes_min < HEADER_BYTES + 1 + 1 + 2 + record_crc_property_bytes || record_bytes_min > INT32_MAX
        || record_magic > 0xFFFFFFFFUL || blank_magic > 0xFFFFFFFFUL || record_magic == blank_magic
        || ipv6_sys_flags > 0xFFFFFFFFUL) {
        PyErr_SetString(PyExc_ValueError, "record_bytes_min, a magic or the IPv6 flags are out of range");
        goto done;
    }
    g_ready = 0;
    memcpy(g_crc_prefix, prefix.buf, (size_t)prefix.len);
    g_crc_prefix_len = prefix.len;
    g_record_crc_property_bytes = record_crc_property_bytes;
    g_record_bytes_min = record_bytes_min;
    g_record_magic = (uint32_t)record_magic;
    g_blank_magic = (uint32_t)blank_magic;
    g_ipv6_sys_flags = (uint32_t)ipv6_sys_flags;
    g_ready = 1;
    result = Py_NewRef(Py_None);

done:
    PyBuffer_Release(&prefix);
    return result;
}
#endif /* MQLAB_RECORD_RULES_H */
