// Umbrella header of the public API.
#pragma once

#include "specstate/batch.h"
#include "specstate/config.h"
#include "specstate/dtype.h"
#include "specstate/gdn.h"
#include "specstate/kda.h"
#include "specstate/log.h"
#include "specstate/mamba2.h"
#include "specstate/pool.h"
#include "specstate/safetensors.h"
#include "specstate/shard.h"
#include "specstate/status.h"
#include "specstate/tensor_view.h"
#include "specstate/version.h"
#include "specstate/vllm.h"
