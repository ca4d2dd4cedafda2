#include "file_state.h"

#include <pthread.h>
#include <string.h>

#define BUCKETS 256

static surge_file *table[BUCKETS];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

/* MPI_File is a pointer in Open MPI and an integer in MPICH: hash its bytes. */
static unsigned bucket(MPI_File fh)
{
    unsigned char b[sizeof(MPI_File)];
    memcpy(b, &fh, sizeof b);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof b; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return (unsigned)(h % BUCKETS);
}

surge_file *file_state_find(MPI_File fh)
{
    pthread_mutex_lock(&table_lock);
    surge_file *f = table[bucket(fh)];
    while (f && memcmp(&f->fh, &fh, sizeof fh))
        f = f->next;
    pthread_mutex_unlock(&table_lock);
    return f;
}

void file_state_add(surge_file *f)
{
    pthread_mutex_lock(&table_lock);
    unsigned b = bucket(f->fh);
    f->next = table[b];
    table[b] = f;
    pthread_mutex_unlock(&table_lock);
}

void file_state_remove(surge_file *f)
{
    pthread_mutex_lock(&table_lock);
    surge_file **p = &table[bucket(f->fh)];
    while (*p && *p != f)
        p = &(*p)->next;
    if (*p)
        *p = f->next;
    pthread_mutex_unlock(&table_lock);
}
