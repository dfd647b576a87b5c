// Every nn layer, for code that builds models (the one include a model file needs).
#pragma once
#include "weft/nn/activation.h"
#include "weft/nn/container.h"
#include "weft/nn/conv.h"
#include "weft/nn/init.h"
#include "weft/nn/linear.h"
#include "weft/nn/module.h"
#include "weft/nn/norm.h"
#include "weft/nn/transformer.h"
