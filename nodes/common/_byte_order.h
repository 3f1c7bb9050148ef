/* Big-endian fields as RocketMQ's records and batch bodies hold them (Java's ByteBuffer order),
 * read and written byte by byte: no alignment assumed, the same on any host. Shared by the
 * compiled record codecs (the _*.c files under nodes/), which include it by its path from their
 * own file. */

#ifndef MQLAB_BYTE_ORDER_H
#define MQLAB_BYTE_ORDER_H

#include <stdint.h>

static inline uint32_t
be_u32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline int32_t
be_i32(const unsigned char *p)
{
    return (int32_t)be_u32(p);
}

static inline int16_t
be_i16(const unsigned char *p)
{
    return (int16_t)(uint16_t)(((unsigned)p[0] << 8) | (unsigned)p[1]);
}

static inline int64_t
be_i64(const unsigned char *p)
{
    return (int64_t)(((uint64_t)be_u32(p) << 32) | (uint64_t)be_u32(p + 4));
}

static inline void
put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void
put_be64(unsigned char *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

#endif
