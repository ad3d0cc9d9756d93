/* worker/train/report.h - rank 0's training progress in the ViTJob's status.
 *
 * Owns: a thread of its own that merge-patches status.progress (step,
 * totalSteps, epoch, loss, imagesPerSecond, etaSeconds, eta,
 * lastCheckpointStep, lastCheckpointURI, testAccuracy, testStep, updateTime;
 * loss to 4 significant digits, epoch to 2 decimals, testAccuracy to 4,
 * imagesPerSecond to 1 decimal and eta as a kubectl duration, as
 * `kubectl get vj` shows them) on the job's status subresource through
 * lib/kube with the in-cluster configuration (service-account token and CA,
 * KUBERNETES_SERVICE_HOST/PORT); the job is $VITJOB_NAME in $VITJOB_NAMESPACE
 * (api/contract.h). It writes at most once per interval, at once for a
 * stored checkpoint, and once more with the final state at report_free
 * (waiting a bounded time). A failed write is logged once per attempt
 * (attempts are an interval apart) with the HTTP status and the server's
 * message, and tried again at the next interval.
 * Must not: block, slow or stop training (the calls training makes copy
 * the progress under a mutex and return; the newest progress replaces the
 * one not yet sent, nothing queues up); log or keep the token beyond lib/kube;
 * write anything of the ViTJob but status.progress.
 *
 *     report *rep = report_from_env(&(report_options){.interval_s = 10});
 *     ... every step:   report_progress(rep, &p);      (rep may be NULL)
 *     ... stored ckpt:  report_checkpoint(rep, &p);
 *     report_free(rep);                                 (the final write)
 */
#ifndef VITJOB_REPORT_H
#define VITJOB_REPORT_H

typedef struct {
    long step, total_steps;
    double epoch, loss, images_per_second;
    double eta_seconds;          /* < 0: unknown (left out) */
    long last_checkpoint_step;   /* < 0: none yet (left out, as is the URI) */
    long skipped_samples;        /* bad samples skipped by all ranks (0: left out) */
    double test_accuracy;        /* the newest evaluation's (NAN: none yet, left out, */
    long test_step;              /*   as is its step) */
    char last_checkpoint_uri[1024];
} report_info;

typedef struct {
    double interval_s;       /* least seconds between two writes; <= 0: 10 */
    double final_timeout_s;  /* report_free's wait for the final write; <= 0: 5 */
    double request_timeout_s; /* one PATCH; <= 0: the smaller of interval and 10 */
    const char *sa_dir;      /* the service-account directory; NULL = KUBE_SA_DIR */
    /* consulted before each write (the final one too): 0 skips it, logged (a
     * rank woken from a freeze must write nothing: heartbeat.h's hb_ok); NULL: always */
    int (*may_write)(const void *ctx);
    const void *may_write_ctx;
} report_options;

typedef struct report report;

/* The reporter of this process when it runs in Kubernetes for a ViTJob
 * (KUBERNETES_SERVICE_HOST set, the service-account files readable,
 * $VITJOB_NAME set), with its thread started; else NULL (reporting off,
 * said in one debug line). Only rank 0 calls it. The caller owns the
 * result and ends it with report_free. */
report *report_from_env(const report_options *o);

/* Hands over the newest progress (copied). Returns at once: never waits for
 * the network. NULL r: nothing. */
void report_progress(report *r, const report_info *p);
/* The same, for a stored checkpoint (p->last_checkpoint_*): written at once
 * rather than at the next interval. */
void report_checkpoint(report *r, const report_info *p);

/* Writes the newest progress once more if not yet written (the final
 * state), waiting at most final_timeout_s for it and for a write in
 * flight, then stops the thread and frees. Accepts NULL. A write still
 * hanging after the wait is abandoned (its thread frees what is left). */
void report_free(report *r);

/* v to `digits` significant digits (4: 0.39043454825878143 -> 0.3904), as
 * the nearest double, which prints short; not finite or 0: v. */
double report_round_sig(double v, int digits);
/* v to `places` decimals (1: 3317.91833261528 -> 3317.9); not finite: v. */
double report_round_places(double v, int places);

/* Writes made so far (2xx answers) and failed, for tests and logs. */
long report_sent(report *r);
long report_failed(report *r);

#endif
