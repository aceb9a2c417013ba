#include "ids.h"

#include <stdlib.h>
#include "alloc.h"

void rt_ids_init(rt_ids *out)
{
    out->ids = NULL;
    out->len = 0;
    out->cap = 0;
}

void rt_ids_free(rt_ids *out)
{
    free(out->ids);
    rt_ids_init(out);
}

int rt_ids_reserve(rt_ids *out, size_t extra)
{
    size_t cap = out->cap ? out->cap : 16;
    uint32_t *ids;
    if (out->len + extra <= out->cap)
        return RT_OK;
    if (extra > ((size_t)-1) / sizeof *ids / 2 - out->len)
        return RT_ENOMEM;
    while (cap < out->len + extra)
        cap *= 2;
    ids = realloc(out->ids, cap * sizeof *ids);
    if (!ids)
        return RT_ENOMEM;
    out->ids = ids;
    out->cap = cap;
    return RT_OK;
}

/* Below this size a radix sort's bucket passes cost more than an insertion sort. */
#define RT_SORT_SMALL 64
#define RT_RADIX_BITS 11
#define RT_RADIX_BUCKETS (1u << RT_RADIX_BITS)

static void insertion_sort(uint32_t *a, size_t n)
{
    size_t i, j;
    for (i = 1; i < n; i++) {
        uint32_t v = a[i];
        for (j = i; j > 0 && a[j - 1] > v; j--)
            a[j] = a[j - 1];
        a[j] = v;
    }
}

int rt_ids_sort(rt_ids *out, size_t from, size_t to)
{
    uint32_t *a, *tmp, *src, *dst, *swap;
    size_t n, i, shift, count[RT_RADIX_BUCKETS];
    uint32_t max = 0;
    if (!out || from > to || to > out->len)
        return RT_EINVAL;
    a = out->ids + from;
    n = to - from;
    if (n <= RT_SORT_SMALL) {
        insertion_sort(a, n);
        return RT_OK;
    }
    tmp = malloc(n * sizeof *tmp);
    if (!tmp)
        return RT_ENOMEM;
    for (i = 0; i < n; i++)
        if (a[i] > max)
            max = a[i];
    src = a;
    dst = tmp;
    for (shift = 0; shift < 32 && (max >> shift) != 0; shift += RT_RADIX_BITS) {
        size_t b, sum = 0;
        for (b = 0; b < RT_RADIX_BUCKETS; b++)
            count[b] = 0;
        for (i = 0; i < n; i++)
            count[(src[i] >> shift) & (RT_RADIX_BUCKETS - 1)]++;
        for (b = 0; b < RT_RADIX_BUCKETS; b++) {
            size_t c = count[b];
            count[b] = sum;
            sum += c;
        }
        for (i = 0; i < n; i++)
            dst[count[(src[i] >> shift) & (RT_RADIX_BUCKETS - 1)]++] = src[i];
        swap = src;
        src = dst;
        dst = swap;
    }
    if (src != a)
        for (i = 0; i < n; i++)
            a[i] = src[i];
    free(tmp);
    return RT_OK;
}
