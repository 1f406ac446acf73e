-- Argo CD health check of memsync's SessionMemory (argocd-cm key
-- resource.customizations.health.agents.memsync.dev_SessionMemory). Lua 5.1, as Argo CD runs it.
--   Degraded:    the session failed (status.message says why), or a spec change the running sandbox Pod
--                cannot take (SpecApplied False)
--   Healthy:     the session runs (Ready True) or ended well (Succeeded)
--   Progressing: everything else: waiting for the operator, a node, a quota, the mount, a restart
local function condition(kind)
  if obj.status == nil or obj.status.conditions == nil then return nil end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == kind then return c end
  end
  return nil
end

if obj.status == nil or obj.status.phase == nil then
  return {status = "Progressing", message = "waiting for the memsync operator"}
end
local applied = condition("SpecApplied")
if applied ~= nil and applied.status == "False" then
  return {status = "Degraded", message = applied.message or "the spec change was not applied"}
end
if obj.status.phase == "Failed" then
  return {status = "Degraded", message = obj.status.message or "Failed"}
end
if obj.status.phase == "Succeeded" then
  return {status = "Healthy", message = obj.status.message or "the session ended; its stores were flushed"}
end
if obj.status.observedGeneration ~= nil and obj.metadata.generation ~= nil
    and obj.status.observedGeneration < obj.metadata.generation then
  return {status = "Progressing", message = "waiting for the operator to observe the latest spec"}
end
local ready = condition("Ready")
if ready ~= nil and ready.status == "True" then
  return {status = "Healthy", message = ready.message or "Ready"}
end
return {status = "Progressing", message = obj.status.message or obj.status.phase}
