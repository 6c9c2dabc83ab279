echo formatting
