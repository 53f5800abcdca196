// Does not compile: for the test of a failed compile's message.
extern "C" void kernel_entry(long *args) {
    return taskring_no_such_function(args);
}
