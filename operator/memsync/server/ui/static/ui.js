// The memsync store browser's only script, shipped with the package and served from this origin (the
// Content-Security-Policy allows no other). Every page works without it; it only helps the redaction form:
// the button stays disabled until the store's name is typed exactly (the server checks it again).
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("form.redact").forEach(function (form) {
    var input = form.querySelector("input[name=confirm]");
    var button = form.querySelector("button[type=submit]");
    if (!input || !button) { return; }
    var update = function () { button.disabled = input.value !== input.dataset.expected; };
    input.addEventListener("input", update);
    update();
  });
});
