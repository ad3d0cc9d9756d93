/* worker/gang/wire.h - the byte order of the rendezvous store's wire format
 * (little-endian integers), shared by the store (rdzv_server.c, rdzv_client.c;
 * its messages: rdzv_proto.h) and the heartbeat
 * that rides on its connections (heartbeat.c).
 * Must not: know any message layout; it only packs and unpacks integers. */
#ifndef VITJOB_WIRE_H
#define VITJOB_WIRE_H

#include <stdint.h>

static inline void wire_put_u16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static inline void wire_put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void wire_put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint16_t wire_get_u16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t wire_get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static inline uint64_t wire_get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#endif
