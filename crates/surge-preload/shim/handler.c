/* The lazily loaded handler (the Rust library that serves Surge's calls)
 * and the calls into it that are not a file call: fork, exec, spawn and
 * vfork hooks, the profile's last flush. The bottom of the shim: it calls
 * no other file of it; those that must hear of the handler's loading
 * register for it (surge_on_handler_loaded).
 *
 * Wraps: vfork.
 */
#include "shim.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static struct surge_handler handler;
static int handler_state; /* 0 not tried, 1 loaded, -1 failed */
static pthread_mutex_t handler_lock = PTHREAD_MUTEX_INITIALIZER;

/* Called once the handler has loaded, in the order given (start.c gives
 * them before anything may load it). */
static void (*on_load[4])(const struct surge_handler *);
static int on_load_count;

void surge_on_handler_loaded(void (*hook)(const struct surge_handler *)) {
    if (on_load_count < (int)(sizeof on_load / sizeof on_load[0])) on_load[on_load_count++] = hook;
}

/* The handler lives next to the shim unless SURGE_PRELOAD_HANDLER names it. */
static int load_handler(void) {
    char path[PATH_MAX];
    const char *named = getenv("SURGE_PRELOAD_HANDLER");
    if (named && *named) {
        snprintf(path, sizeof path, "%s", named);
    } else {
        Dl_info self;
        if (!dladdr((void *)load_handler, &self) || !self.dli_fname) return -1;
        snprintf(path, sizeof path, "%s", self.dli_fname);
        char *slash = strrchr(path, '/');
        size_t dir_len = slash ? (size_t)(slash - path + 1) : 0;
        snprintf(path + dir_len, sizeof path - dir_len, "libsurge_preload_handler.so");
    }
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "surge: cannot load the interposer handler %s: %s\n", path, dlerror());
        return -1;
    }
#define SURGE_CORE_LOOKUP(ret, name, params)                                          \
    handler.name = (ret(*) params)dlsym(lib, "surge_px_" #name);                          \
    if (!handler.name) {                                                                 \
        fprintf(stderr, "surge: %s lacks surge_px_%s: rebuild Surge\n", path, #name); \
        return -1;                                                                    \
    }
    SURGE_HANDLER_FUNCTIONS(SURGE_CORE_LOOKUP)
#undef SURGE_CORE_LOOKUP
    return 1;
}

const struct surge_handler *surge_handler_if_loaded(void) {
    return __atomic_load_n(&handler_state, __ATOMIC_ACQUIRE) == 1 ? &handler : NULL;
}

const struct surge_handler *surge_handler(void) {
    int state = __atomic_load_n(&handler_state, __ATOMIC_ACQUIRE);
    if (state == 0) {
        pthread_mutex_lock(&handler_lock);
        if (handler_state == 0) {
            /* Loading (dlopen's search, the handler's start) is not the program's call: its errno is not either. */
            int saved = errno;
            surge_in_handler++;
            int loaded = load_handler();
            if (loaded == 1) {
                for (int i = 0; i < on_load_count; i++) on_load[i](&handler);
            }
            surge_in_handler--;
            errno = saved;
            __atomic_store_n(&handler_state, loaded, __ATOMIC_RELEASE);
        }
        state = handler_state;
        pthread_mutex_unlock(&handler_lock);
    }
    if (state != 1) {
        errno = ENOTCONN;
        return NULL;
    }
    return &handler;
}


void surge_handler_atfork_prepare(void) {
    /* The handler opens lock files before a fork (src/locks.rs): its own calls go to libc. */
    if (__atomic_load_n(&handler_state, __ATOMIC_ACQUIRE) == 1) HANDLER_CALL_VOID(&handler, atfork_prepare);
}

void surge_handler_atfork_parent(void) {
    if (__atomic_load_n(&handler_state, __ATOMIC_ACQUIRE) == 1) HANDLER_CALL_VOID(&handler, atfork_parent);
}

void surge_handler_atfork_child(void) {
    if (__atomic_load_n(&handler_state, __ATOMIC_ACQUIRE) == 1) HANDLER_CALL_VOID(&handler, atfork_child);
}


/* Calls the handler's `hook` if it is loaded, keeping errno. */
static void handler_hook(void (*const *hook)(void)) {
    if (__atomic_load_n(&handler_state, __ATOMIC_ACQUIRE) != 1) return;
    int err = errno;
    surge_in_handler++;
    (*hook)();
    surge_in_handler--;
    errno = err;
}

/* Lock files go along with the placeholders an exec or spawn passes on
 * (src/locks.rs), so a lock the new program takes outlives it as long as
 * the open file description does. */
void surge_before_spawn(void) {
    handler_hook(&handler.share_lock_files);
    handler_hook(&handler.before_exec);
}
void surge_after_spawn(void) { handler_hook(&handler.after_spawn); }

/* vfork (dash runs its commands so, Python's subprocess too) shares the
 * placeholders with a child as fork does, without fork's handlers: the
 * lock files are opened here in the parent first, then libc's vfork is
 * entered by a jump. No frame of the shim's may stay on the stack, which
 * the child shares and overwrites before the parent returns through it. */
__attribute__((visibility("hidden"))) pid_t (*surge_real_vfork)(void);
__attribute__((visibility("hidden"), used)) void surge_before_vfork(void) {
    if (!surge_real_vfork) surge_real_vfork = (pid_t(*)(void))dlsym(RTLD_NEXT, "vfork");
    handler_hook(&handler.share_lock_files);
}
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl vfork\n"
        ".type vfork, @function\n"
        "vfork:\n"
        "    sub $8, %rsp\n" /* the call below needs the stack 16-byte aligned */
        "    call surge_before_vfork\n"
        "    add $8, %rsp\n"
        "    jmp *surge_real_vfork(%rip)\n"
        ".size vfork, . - vfork\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl vfork\n"
        ".type vfork, %function\n"
        "vfork:\n"
        "    stp x29, x30, [sp, #-16]!\n"
        "    bl surge_before_vfork\n"
        "    ldp x29, x30, [sp], #16\n"
        "    adrp x16, surge_real_vfork\n"
        "    ldr x16, [x16, :lo12:surge_real_vfork]\n"
        "    br x16\n"
        ".size vfork, . - vfork\n");
#endif

/* The handler's last profile flush, when the image ends. */
void surge_handler_flush_profile(void) {
    if (__atomic_load_n(&handler_state, __ATOMIC_ACQUIRE) == 1) HANDLER_CALL_VOID(&handler, flush_profile);
}

/* Lock files go along with the placeholders an exec passes on. */
void surge_handler_before_exec(void) { handler_hook(&handler.before_exec); }
