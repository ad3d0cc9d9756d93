/* lib/stdfds.h - descriptors 0, 1 and 2 held open from a program's start.
 *
 * Owns: opening /dev/null onto whichever of stdin, stdout and stderr a
 * program was started without (`>&-`, `2>&-`, `<&-`, or a parent that
 * closed them), as daemons do, so that the first file the program opens
 * never takes descriptor 1 or 2 and receives the JSON summary or the log
 * lines, nor descriptor 0. Every program's main() calls stdfds_ensure
 * before anything else (tests/stdfds.bats).
 * Must not: touch a descriptor that is open; allocate; use stdio before the
 * three are open.
 */
#ifndef VITJOB_STDFDS_H
#define VITJOB_STDFDS_H

/* Opens /dev/null onto each of 0, 1 and 2 that is closed (read-only for 0,
 * write-only for 1 and 2; inherited across exec). Where /dev/null cannot be
 * opened, writes one line naming prog and why to descriptor 2 (if it is
 * open) and exits with exit_code. */
void stdfds_ensure(const char *prog, int exit_code);

#endif
