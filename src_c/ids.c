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
