/* The state the shim's files share, defined here only (shim.h declares
 * it and says what each is), so that no file depends on another's
 * globals: the mount prefix, the FUSE mode, the descriptor marks.
 *
 * Wraps: none.
 */
#include "shim.h"

char surge_mount[PATH_MAX];
size_t surge_mount_len;
int surge_cwd_inside;
unsigned char surge_fd_marks[SURGE_MAX_FDS];
__thread int surge_in_handler;
bool surge_fuse;
pid_t surge_owner;
unsigned surge_umask_bits;
