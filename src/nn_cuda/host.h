/*
 * host.h: the program's side of the CUDA training stack, plain C and no CUDA: loading libcohort_nn_cuda.so (with
 * the reason in one line when it cannot be used) and describing a cohort_model to it. Compiled into the programs
 * that train on the GPU (fmnist-train, the GPU tests), never into the plugin, which must not call libcohort.
 */
#ifndef COHORT_NN_CUDA_HOST_H
#define COHORT_NN_CUDA_HOST_H

#include <stddef.h>

#include "cohort/nn.h"
#include "nn_cuda/nn_cuda_plugin.h"

/*
 * The plugin's table once it is loaded and sees a usable GPU; else NULL and why (one line: where the plugin was
 * looked for, or why the GPU cannot be used).
 */
const cohort__nnc_api *cohort__nnc_open(char *why, size_t len);

/*
 * Fills desc (the layers into layers[COHORT__NNC_MAX_LAYERS], which desc then points to) from an initialised model
 * whose input is [channels, height, width] and output classes; the optimizer's fields are left for the caller.
 * 0, or -1 with why.
 */
int cohort__nnc_describe_model(const cohort_model *model, int channels, int height, int width, int classes,
                               int max_batch, cohort__nnc_net_desc *desc, cohort_layer_info *layers, char *why,
                               size_t len);

#endif
