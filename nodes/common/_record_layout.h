/* A commitlog record's header as every compiled codec reads or writes it:
 * nodes.store.record.HEADER, big-endian (RocketMQ's MessageDecoder layout). Each module still
 * checks HEADER_FORMAT against the one Python hands its init(), so a layout change on the
 * Python side makes the module refuse to start rather than misread records. */

#ifndef MQLAB_RECORD_LAYOUT_H
#define MQLAB_RECORD_LAYOUT_H

#define HEADER_FORMAT ">iIIiiqqiq4siq4siiqi"
#define HEADER_BYTES 88
#define POS_TOTAL_SIZE 0
#define POS_MAGIC 4
#define POS_BODY_CRC 8
#define POS_QUEUE_ID 12
#define POS_FLAG 16
#define POS_QUEUE_OFFSET 20
#define POS_PHYS_OFFSET 28
#define POS_SYS_FLAG 36
#define POS_BORN_TIMESTAMP 40
#define POS_BORN_IP 48
#define POS_BORN_PORT 52
#define POS_STORE_TIMESTAMP 56
#define POS_STORE_IP 64
#define POS_STORE_HOST POS_STORE_IP /* store ip (4) then store port (4): the offset message id's host part */
#define POS_STORE_PORT 68
#define POS_RECONSUME_TIMES 72
#define POS_PREPARED_TX_OFFSET 76
#define POS_BODY_LEN 84
#define PHYS_OFFSET_BYTES 8
#define STORE_HOST_BYTES 8
#define IP_BYTES 4

/* after the body: the topic length (one byte), the topic, the properties length (a Java short),
 * the properties: name \x01 value \x02, pair after pair */
#define PROPS_LEN_FORMAT ">h"
#define PROPS_LEN_BYTES 2
#define PROPS_LEN_MAX 32767
#define NAME_SEPARATOR 0x01 /* PROPERTY_NAME_SEPARATOR */
#define PAIR_SEPARATOR 0x02 /* PROPERTY_SEPARATOR: ends each pair; the record CRC pair, last, ends the record */

#endif
