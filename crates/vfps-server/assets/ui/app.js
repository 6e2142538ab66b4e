// vfps admin UI: small additions to pages that work without them.
"use strict";

// A fixed-length method (SHA-256, UUIDs) fixes the length: shown and locked.
function lockLength() {
  const method = document.getElementById("ns-method");
  const length = document.getElementById("ns-length");
  if (!method || !length) return;
  let free = length.value;
  const update = () => {
    const fixed = method.selectedOptions[0]?.dataset.fixedLength;
    if (fixed) {
      if (!length.readOnly) free = length.value;
      length.value = fixed;
      length.readOnly = true;
      length.setAttribute("aria-readonly", "true");
    } else {
      if (length.readOnly) length.value = free;
      length.readOnly = false;
      length.removeAttribute("aria-readonly");
    }
  };
  method.addEventListener("change", update);
  update();
}

// A delete's button is enabled once its row's name is typed.
function confirmDeletes() {
  for (const input of document.querySelectorAll("input[name=confirm]")) {
    const form = input.form;
    const button = form.querySelector("button[type=submit]");
    const expected = input.id.replace(/^confirm-/, "");
    if (input.closest("fieldset")?.disabled) continue;
    const update = () => { button.disabled = input.value.trim() !== expected; };
    input.addEventListener("input", update);
    update();
  }
}

// After a form, the result is where the keyboard and screen reader are.
function focusOutcome() {
  const outcome = document.querySelector("#result, [role=alert]");
  if (!outcome) return;
  const holder = outcome.closest("p, div") || outcome;
  holder.tabIndex = -1;
  holder.focus();
}

document.addEventListener("DOMContentLoaded", () => {
  lockLength();
  confirmDeletes();
  focusOutcome();
});
