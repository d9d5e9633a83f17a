// Loss scaling inside the step graph (float16 training): two passes of the training pipeline
// (passes/training.h, LossScaleSpec). Everything is IR: the scale and its counter are state
// updated through the graph's `update` list like %ottr.step, so the CPU reference runs the same
// step and the CUDA executor captures and replays it with no host synchronisation.
//
// "scale-loss" (after append-loss, before autodiff) adds the scale; autodiff seeds the loss's
// gradient with it instead of 1, so every gradient is S times the true one and a float16
// backward keeps small gradients above float16's underflow (2^-24):
//   after:   init %ottr.loss_scale : f32[] = 65536
//            (autodiff: %loss's gradient is %ottr.loss_scale)
//
// "unscale-gradients" (after group-optimizer-updates, which then groups every update, even a
// single one) unscales in the optimizer, skips a step with a non-finite value and updates S:
//   before:  %ottr.step.new = Add(%ottr.step, %ottr.one)
//            %w.new, %b.new, .. = ottr::AdamUpdateN(%ottr.lr, %ottr.step.new, %w, %b, %w.grad, %b.grad, ..)
//            update %ottr.step <- %ottr.step.new
//   after:   %ottr.grads_finite : bool[] = ottr::AllFinite(%w.grad, %b.grad, .., %loss)
//            %w.new, %b.new, .. = ottr::AdamUpdateN(.., %ottr.loss_scale, %ottr.grads_finite)
//                                   {guarded = 1, unscale = 1}
//            %ottr.step.unscaled = Where(%ottr.grads_finite, %ottr.step.new, %ottr.step)
//            %ottr.loss_scale.new, %ottr.loss_scale.good_steps.new = ottr::LossScaleUpdate(
//                %ottr.loss_scale, %ottr.loss_scale.good_steps, %ottr.grads_finite)
//                {backoff_factor = 0.5, growth_factor = 2, growth_interval = 2000}     (dynamic)
//            update %ottr.step <- %ottr.step.unscaled
//            update %ottr.loss_scale <- %ottr.loss_scale.new                         (dynamic)
//            update %ottr.loss_scale.good_steps <- %ottr.loss_scale.good_steps.new   (dynamic)
// On a step with an infinity or NaN in a gradient (or the loss) the update leaves parameters and
// optimizer state as they were and the step counter holds, so Adam's bias correction counts only
// the steps taken (as torch.amp.GradScaler, which skips optimizer.step()). The finiteness check
// reads every gradient once more before the update: the update kernel cannot both decide and
// apply in one launch (its blocks update in parallel, and one that found an infinity could not
// undo the others), so the check is a separate multi-tensor reduction, like PyTorch's
// _amp_foreach_non_finite_check_and_unscale_.
// With gradient clipping the norm is measured on scaled gradients: the pass divides
// %ottr.grad_norm by the scale before the clip coefficient reads it, so clipping sees true norms.
// A float guard already on an update (e.g. the loss) is folded into AllFinite.
//
// "nan-guard" is the same check, guard and step hold without scale or unscale: a step whose loss
// or any gradient is not finite is skipped on the device (spec.nan_guard without loss scaling).
//
// Preconditions: scale-loss before autodiff; unscale-gradients after the optimizer's updates
// are grouped (FailedPrecondition naming a single-tensor update otherwise).
#ifndef OTTR_PASSES_LOSS_SCALING_H_
#define OTTR_PASSES_LOSS_SCALING_H_

#include <memory>

#include "passes/pass.h"
#include "passes/training.h"

namespace ottr::passes {

// `spec.kind` is kStatic or kDynamic.
std::unique_ptr<Pass> CreateScaleLossPass(const LossScaleSpec& spec);
std::unique_ptr<Pass> CreateUnscaleGradientsPass(const LossScaleSpec& spec);
std::unique_ptr<Pass> CreateNanGuardPass();

}  // namespace ottr::passes

#endif  // OTTR_PASSES_LOSS_SCALING_H_
