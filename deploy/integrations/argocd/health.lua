-- Argo CD health check of a CanaryDaemonSet (canary.daemonset.dev/v1alpha1).
--
-- Reads the kstatus conditions the controller writes (Ready, Reconciling, Stalled) and, for a
-- status written before they existed, the phase. A status the controller has not caught up
-- with (observedGeneration behind metadata.generation) is Progressing: the verdict of the
-- previous spec says nothing of this one. A gate that only a person opens (a pause on request,
-- a `pause: {}` step) is Suspended, as Argo Rollouts' pauses are; a failed, rolled back or
-- crash-looping rollout is Degraded; only a rollout of the spec's target that ended well is
-- Healthy, so an Argo CD RollingSync or a sync wave waits for it.
local hs = {}

local function condition(status, type)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == type then
      return c
    end
  end
  return nil
end

-- "Reason: message", or the reason alone.
local function said(c)
  if c.message ~= nil and c.message ~= "" then
    return c.reason .. ": " .. c.message
  end
  return c.reason
end

local status = obj.status
if status == nil or status.phase == nil then
  hs.status = "Progressing"
  -- No phase yet: the controller has not acted, or it waits (Reconciling) for the DaemonSet
  -- a workloadRef names, and says so.
  local waiting = nil
  if status ~= nil then
    waiting = condition(status, "Reconciling")
  end
  if waiting ~= nil and waiting.status == "True" then
    hs.message = said(waiting)
  else
    hs.message = "Waiting for the controller to act on the CanaryDaemonSet"
  end
  return hs
end

if obj.metadata.generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < obj.metadata.generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the controller to observe generation " .. obj.metadata.generation
  return hs
end

local stalled = condition(status, "Stalled")
local reconciling = condition(status, "Reconciling")
local ready = condition(status, "Ready")
if stalled ~= nil or reconciling ~= nil or ready ~= nil then
  if stalled ~= nil and stalled.status == "True" then
    if stalled.reason == "HeldOnRequest" or stalled.reason == "AwaitingPromotion" then
      hs.status = "Suspended"
    else
      hs.status = "Degraded"
    end
    hs.message = said(stalled)
    return hs
  end
  if ready ~= nil and ready.status == "True" then
    hs.status = "Healthy"
    hs.message = said(ready)
    return hs
  end
  hs.status = "Progressing"
  if reconciling ~= nil then
    hs.message = said(reconciling)
  else
    hs.message = "phase " .. status.phase
  end
  return hs
end

-- A status written before the kstatus conditions: the phase alone.
if status.phase == "successful" then
  hs.status = "Healthy"
elseif status.phase == "failed" or status.phase == "rolledBack" then
  hs.status = "Degraded"
else
  hs.status = "Progressing"
end
hs.message = status.message or ("phase " .. status.phase)
return hs
