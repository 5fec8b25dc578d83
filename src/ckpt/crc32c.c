/* crc32c.c: slicing-by-8 tables, and the SSE4.2 instruction where the CPU has it. */
#include "ckpt/crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82F63B78u

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
    table[0][i] = c;
  }
  for (int t = 1; t < 8; t++)
    for (int i = 0; i < 256; i++)
      table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

uint32_t cohort__crc32c_sw(uint32_t crc, const void *buf, size_t len) {
  pthread_once(&table_once, table_init);
  const uint8_t *p = buf;
  crc = ~crc;
  while (len >= 8) {
    uint64_t v;
    memcpy(&v, p, 8); /* little-endian hosts only, like the file format */
    v ^= crc;
    crc = table[7][v & 0xff] ^ table[6][(v >> 8) & 0xff] ^ table[5][(v >> 16) & 0xff] ^ table[4][(v >> 24) & 0xff] ^
          table[3][(v >> 32) & 0xff] ^ table[2][(v >> 40) & 0xff] ^ table[1][(v >> 48) & 0xff] ^ table[0][v >> 56];
    p += 8;
    len -= 8;
  }
  while (len--)
    crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
  return ~crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len) {
  const uint8_t *p = buf;
  uint64_t c = ~crc;
  while (len >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
    p += 8;
    len -= 8;
  }
  uint32_t c32 = (uint32_t)c;
  while (len--)
    c32 = __builtin_ia32_crc32qi(c32, *p++);
  return ~c32;
}
#endif

uint32_t cohort__crc32c(uint32_t crc, const void *buf, size_t len) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("sse4.2")) return crc32c_hw(crc, buf, len);
#endif
  return cohort__crc32c_sw(crc, buf, len);
}
