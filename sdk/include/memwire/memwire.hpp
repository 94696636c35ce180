#pragma once

// Umbrella header: everything a worker needs to hand memory to, and take it from, a peer.
#include "memwire/block_grant.hpp"
#include "memwire/clock.hpp"
#include "memwire/connector.hpp"
#include "memwire/descriptor.hpp"
#include "memwire/device.hpp"
#include "memwire/error.hpp"
#include "memwire/error_codes.hpp"
#include "memwire/layer_stream.hpp"
#include "memwire/log_level.hpp"
#include "memwire/metadata.hpp"
#include "memwire/operation.hpp"
#include "memwire/pool.hpp"
#include "memwire/request_scope.hpp"
#include "memwire/shared_buffer.hpp"
#include "memwire/status.hpp"
#include "memwire/telemetry.hpp"
