/* A thread that runs queued jobs one after another, in submission order.
 * Used for asynchronous file access (the overlap algorithms) and for the
 * progress of nonblocking MPI-IO calls. */
#ifndef SURGE_WORKER_H
#define SURGE_WORKER_H

typedef struct work_item {
    void (*run)(struct work_item *);      /* in the worker thread */
    /* Optional, after `done` is set and the queue lock released; the item
     * must still be alive then (nothing else may free it before this). */
    void (*finished)(struct work_item *);
    int done;
    struct work_item *next;
} work_item;

typedef struct worker worker;

worker *worker_start(void); /* NULL if no thread could be created */
void worker_submit(worker *w, work_item *item);
void worker_wait(worker *w, work_item *item);
void worker_drain(worker *w); /* until every submitted item is done */
void worker_stop(worker *w);  /* drain, join, free; w may be NULL */

#endif
