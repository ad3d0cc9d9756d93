/* worker/plan/plan_cmd.h - `vitjob-worker plan`: its arguments, the probes
 * it runs with --measure (plan_probe.h), and its output (plan_output.h's
 * table or JSON).
 * Must not: train, or touch the backend beyond the CPU probes.
 */
#ifndef VITJOB_PLAN_CMD_H
#define VITJOB_PLAN_CMD_H

/* argv after "plan"; returns the process exit code (api/exitcode.h). */
int plan_cmd_main(int argc, char **argv);

#endif
