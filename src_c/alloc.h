/*
 * Allocation hooks for the fault-injection tests: built with -DRT_FAULT_INJECTION (the test
 * driver does), every allocation of the library goes through functions that the driver
 * defines and can make fail. Without it (the Python extension) this header changes nothing.
 * Include it after <stdlib.h>.
 */
#ifndef RT_ALLOC_H
#define RT_ALLOC_H

#ifdef RT_FAULT_INJECTION
#include <stddef.h>
void *rt_fi_malloc(size_t size);
void *rt_fi_calloc(size_t n, size_t size);
void *rt_fi_realloc(void *p, size_t size);
#define malloc rt_fi_malloc
#define calloc rt_fi_calloc
#define realloc rt_fi_realloc
#endif

#endif
