#include "worker.h"

#include <pthread.h>
#include <stdlib.h>

struct worker {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    work_item *head, *tail;
    int pending; /* submitted and not yet done */
    int stop;
};

static void *worker_main(void *arg)
{
    worker *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->head && !w->stop)
            pthread_cond_wait(&w->cond, &w->lock);
        if (!w->head)
            break;
        work_item *item = w->head;
        w->head = item->next;
        if (!w->head)
            w->tail = NULL;
        pthread_mutex_unlock(&w->lock);
        item->run(item);
        void (*finished)(work_item *) = item->finished; /* a waiter may free item once done */
        pthread_mutex_lock(&w->lock);
        item->done = 1;
        w->pending--;
        pthread_cond_broadcast(&w->cond);
        if (finished) {
            pthread_mutex_unlock(&w->lock);
            finished(item);
            pthread_mutex_lock(&w->lock);
        }
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

worker *worker_start(void)
{
    worker *w = calloc(1, sizeof *w);
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    if (pthread_create(&w->thread, NULL, worker_main, w)) {
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->cond);
        free(w);
        return NULL;
    }
    return w;
}

void worker_submit(worker *w, work_item *item)
{
    item->done = 0;
    item->next = NULL;
    pthread_mutex_lock(&w->lock);
    if (w->tail)
        w->tail->next = item;
    else
        w->head = item;
    w->tail = item;
    w->pending++;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

void worker_wait(worker *w, work_item *item)
{
    pthread_mutex_lock(&w->lock);
    while (!item->done)
        pthread_cond_wait(&w->cond, &w->lock);
    pthread_mutex_unlock(&w->lock);
}

void worker_drain(worker *w)
{
    pthread_mutex_lock(&w->lock);
    while (w->pending)
        pthread_cond_wait(&w->cond, &w->lock);
    pthread_mutex_unlock(&w->lock);
}

void worker_stop(worker *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = 1; /* the thread empties the queue first */
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
    free(w);
}
