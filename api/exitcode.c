/* api/exitcode.c - see exitcode.h. The table is the contract; `make schema`
 * writes docs/design.md's copy of it (api/config_schema.c). */
#include "exitcode.h"

#include <signal.h>

static const vj_err_row table[] = {
    {VJ_ERR_USAGE, "usage", VITJOB_EXIT_CONFIG, 1, "the command line is wrong"},
    {VJ_ERR_CONFIG, "config", VITJOB_EXIT_CONFIG, 1,
     "a config key or value is wrong, or two do not go together (the message names them)"},
    {VJ_ERR_ENVIRONMENT, "environment", VITJOB_EXIT_CONFIG, 1,
     "a VITJOB_* environment variable is wrong"},
    {VJ_ERR_UNSUPPORTED, "unsupported", VITJOB_EXIT_CONFIG, 1,
     "the config asks for what this build cannot do yet"},
    {VJ_ERR_NO_DEVICE, "no_device", VITJOB_EXIT_CONFIG, 1,
     "training.device=cuda and no usable GPU (the message says why)"},
    {VJ_ERR_OUTPUT, "output", VITJOB_EXIT_CONFIG, 1,
     "an output path (training.exportPath, --metrics) cannot be written; checked before the "
     "first step"},
    {VJ_ERR_INIT_WEIGHTS, "init_weights", VITJOB_EXIT_CONFIG, 1,
     "model.init is unreadable, not a valid safetensors file nor a checkpoint, does not match "
     "the model beyond what finetuning adapts (a new head, a resampled pos_embed), or holds NaN "
     "or Inf"},
    {VJ_ERR_TOO_LARGE, "too_large", VITJOB_EXIT_CONFIG, 1,
     "the model, optimizer, activations and data need more memory than the process may have "
     "(the message gives both numbers)"},
    {VJ_ERR_DIVERGED, "diverged", VITJOB_EXIT_CONFIG, 1,
     "the loss became NaN or infinite; training is deterministic, so a retry would diverge "
     "again: lower training.optimizer.lr"},
    {VJ_ERR_DATA, "data", VITJOB_EXIT_DATA, 1,
     "a data file is missing, unreadable, malformed or does not fit the model"},
    {VJ_ERR_OUT_OF_MEMORY, "out_of_memory", VITJOB_EXIT_FAILURE, 0,
     "an allocation failed although the memory check passed (something else took memory)"},
    {VJ_ERR_DEVICE_FAULT, "device_fault", VITJOB_EXIT_FAILURE, 0,
     "the GPU reported an error while training"},
    {VJ_ERR_IO, "io", VITJOB_EXIT_FAILURE, 0,
     "a write failed for a reason that can pass (disk full, quota, I/O error)"},
    {VJ_ERR_RENDEZVOUS, "rendezvous", VITJOB_EXIT_FAILURE, 0,
     "the ranks did not all meet within training.rendezvousTimeoutSeconds (the message names "
     "the missing ranks), or this process is of an older restart generation"},
    {VJ_ERR_PEER_LOST, "peer_lost", VITJOB_EXIT_FAILURE, 0,
     "another rank died or did not answer a collective within "
     "training.collectiveTimeoutSeconds"},
    {VJ_ERR_STOPPED, "stopped", 128 + SIGTERM, 0,
     "SIGTERM or SIGINT stopped the run: exit code 128 + the signal (143, 130); one "
     "rank abandons the unfinished step, many ranks end together after the step they "
     "are in, checkpointed"},
};

const vj_err_row *vj_err_table(size_t *n)
{
    *n = sizeof table / sizeof table[0];
    return table;
}

const vj_err_row *vj_err_info(vj_err e)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].err == e) return &table[i];
    return 0;
}

int vj_exit_code(vj_err e, int stopped_by)
{
    if (e == VJ_OK) return VITJOB_EXIT_OK;
    if (e == VJ_ERR_STOPPED && stopped_by > 0 && stopped_by < 64) return 128 + stopped_by;
    const vj_err_row *r = vj_err_info(e);
    return r ? r->exit_code : VITJOB_EXIT_FAILURE;
}

int vj_exit_permanent(int code)
{
    return code == VITJOB_EXIT_CONFIG || code == VITJOB_EXIT_DATA;
}
