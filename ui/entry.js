// What the upload page needs from Uppy, as one global (window.SluiceUppy).
export { default as Uppy } from "@uppy/core";
export { default as Dashboard } from "@uppy/dashboard";
export { default as Tus } from "@uppy/tus";
export { default as AwsS3 } from "@uppy/aws-s3";
export { default as GoldenRetriever } from "@uppy/golden-retriever";
