/* host.c: loading the CUDA training plugin and describing a model to it (host.h). */
#include "nn_cuda/host.h"

#include <stdio.h>
#include <string.h>

#include "core/plugin.h"

const cohort__nnc_api *cohort__nnc_open(char *why, size_t len) {
  void *entry = NULL;
  /* No environment override: the plugin is found beside the program (build/lib, or the install's lib). */
  if (cohort__plugin_load(COHORT__NNC_PLUGIN_FILE, NULL, COHORT__NNC_PLUGIN_ENTRY, &entry) != COHORT_OK) {
    snprintf(why, len, "%s (this build has no CUDA training plugin, or its CUDA libraries are missing)",
             cohort_last_error());
    return NULL;
  }
  const cohort__nnc_api *api = ((cohort__nnc_entry_fn)entry)();
  if (!api || api->version != COHORT__NNC_PLUGIN_VERSION) {
    snprintf(why, len, "%s is version %d, this program speaks version %d", COHORT__NNC_PLUGIN_FILE,
             api ? api->version : -1, COHORT__NNC_PLUGIN_VERSION);
    return NULL;
  }
  if (api->available() != 0) {
    snprintf(why, len, "%s", api->last_error());
    return NULL;
  }
  return api;
}

int cohort__nnc_describe_model(const cohort_model *model, int channels, int height, int width, int classes,
                               int max_batch, cohort__nnc_net_desc *desc, cohort_layer_info *layers, char *why,
                               size_t len) {
  memset(desc, 0, sizeof *desc);
  const int nlayers = cohort_model_num_layers(model), nparams = cohort_model_num_params(model);
  if (nlayers < 1 || nlayers > COHORT__NNC_MAX_LAYERS || nparams > COHORT__NNC_MAX_PARAMS) {
    snprintf(why, len, "a model of %d layers and %d parameter tensors: the GPU runs up to %d and %d", nlayers, nparams,
             COHORT__NNC_MAX_LAYERS, COHORT__NNC_MAX_PARAMS);
    return -1;
  }
  for (int i = 0; i < nlayers; i++)
    if (cohort_model_layer(model, i, &layers[i]) != COHORT_OK) {
      snprintf(why, len, "%s", cohort_last_error());
      return -1;
    }
  for (int i = 0; i < nparams; i++) {
    const cohort_param *p = cohort_model_param(model, i);
    if (!p) {
      snprintf(why, len, "the model is not initialised");
      return -1;
    }
    desc->param_numel[i] = p->numel;
    desc->param_ndim[i] = p->ndim;
  }
  desc->nlayers = nlayers;
  desc->layers = layers;
  desc->nparams = nparams;
  desc->channels = channels;
  desc->height = height;
  desc->width = width;
  desc->classes = classes;
  desc->max_batch = max_batch;
  return 0;
}
